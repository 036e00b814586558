//go:build kernel

package iptables_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
)

// inNetns runs fn on a locked OS thread inside a fresh network namespace,
// so netlink sockets opened and binaries run by fn live there.
// TODO(ktest): switch to ktest.NewNode(t).Do once test/ktest lands.
func inNetns(t testing.TB, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		orig, err := netns.Get()
		if err != nil {
			t.Error(err)
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		fn()
	}()
	<-done
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// ipsetSave is `ipset save` restricted to names, in plan's form: create
// lines without the kernel's "bucketsize N initval 0x..." suffix, sets by
// name, members sorted.
func ipsetSave(t testing.TB, names map[string]bool) string {
	t.Helper()
	blocks := map[string][]string{}
	var order []string
	for line := range strings.Lines(run(t, "ipset", "save")) {
		f := strings.Fields(line)
		if len(f) < 2 || !names[f[1]] {
			continue
		}
		switch f[0] {
		case "create":
			if i := slices.Index(f, "bucketsize"); i > 0 {
				f = f[:i]
			}
			// The kernel grows hashsize with the set; plan prints the
			// initial size.
			if i := slices.Index(f, "hashsize"); i > 0 && i+1 < len(f) {
				f[i+1] = fmt.Sprint(iptables.HashSize)
			}
			order = append(order, f[1])
			blocks[f[1]] = []string{strings.Join(f, " ")}
		case "add":
			blocks[f[1]] = append(blocks[f[1]], strings.TrimSpace(line))
		}
	}
	slices.Sort(order)
	var b strings.Builder
	for _, n := range order {
		slices.Sort(blocks[n][1:])
		for _, l := range blocks[n] {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// planSave is plan's rendering of sets, members sorted the way ipsetSave
// sorts them (as text).
func planSave(sets []iptables.IPSet) string {
	sorted := slices.Clone(sets)
	iptables.SortSets(sorted)
	var b strings.Builder
	for _, s := range sorted {
		b.Write(iptables.AppendCreate(nil, &s))
		b.WriteString("\n")
		var adds []string
		for _, e := range s.Entries {
			adds = append(adds, "add "+s.Name+" "+string(iptables.AppendEntry(nil, s.Type, e)))
		}
		slices.Sort(adds)
		for _, l := range adds {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func setNames(sets []iptables.IPSet) map[string]bool {
	m := map[string]bool{}
	for _, s := range sets {
		m[s.Name] = true
	}
	return m
}

// ourRules is iptables-save of rs's tables restricted to rs's chains, each
// rule as "-A CHAIN ..."; built-in chains list only rules jumping to ours.
func ourRules(t testing.TB, rs iptables.Ruleset) string {
	t.Helper()
	bin := "iptables-save"
	if rs.Family == iptables.FamilyIPv6 {
		bin = "ip6tables-save"
	}
	var b strings.Builder
	for _, tab := range rs.Tables {
		saved := iptables.ParseSaveAll(run(t, bin, "-t", tab.Name))[tab.Name]
		ours := map[string]bool{}
		for _, c := range tab.Chains {
			if !c.Builtin {
				ours[c.Name] = true
			}
		}
		b.WriteString("*" + tab.Name + "\n")
		for _, c := range tab.Chains {
			rules := saved[c.Name]
			if c.Builtin {
				rules = iptables.OurJumps(rules, ours)
			}
			for _, r := range rules {
				b.WriteString("-A " + c.Name + " " + r + "\n")
			}
		}
	}
	return b.String()
}

// planRules is plan's rendering of the same.
func planRules(rs iptables.Ruleset) string {
	var b strings.Builder
	for _, tab := range rs.Tables {
		b.WriteString("*" + tab.Name + "\n")
		for _, c := range tab.Chains {
			for _, r := range c.Rules {
				b.Write(iptables.AppendRule(nil, c.Name, r))
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// dualStackPlan is every set of both families with entries of every type.
func dualStackPlan() ([]iptables.IPSet, []iptables.Ruleset) {
	sets := plannedSets()
	v6 := iptables.EmptySets(iptables.FamilyIPv6)
	for i := range v6 {
		switch v6[i].Type {
		case iptables.TypeHashIPPort:
			v6[i].Entries = []iptables.Entry{{IP: mustAddr("fd00:96::10"), Protocol: model.TCP, Port: 80}}
		case iptables.TypeHashIPPortIP:
			v6[i].Entries = []iptables.Entry{{IP: mustAddr("fd00:244::5"), Protocol: model.UDP, Port: 53, Net: netip.MustParsePrefix("fd00:244::5/128")}}
		case iptables.TypeHashIPPortNet:
			v6[i].Entries = []iptables.Entry{{IP: mustAddr("2001:db8::10"), Protocol: model.SCTP, Port: 9, Net: netip.MustParsePrefix("2001:db8:1::/48")}}
		case iptables.TypeHashIP:
			v6[i].Entries = []iptables.Entry{{IP: mustAddr("fd00:96::10")}}
		case iptables.TypeBitmapPort:
			v6[i].Entries = []iptables.Entry{{Port: 30080}}
		}
	}
	sets = append(sets, v6...)
	return sets, []iptables.Ruleset{testRules(iptables.FamilyIPv4), testRules(iptables.FamilyIPv6)}
}

func checkKernel(t *testing.T, sets []iptables.IPSet, rules []iptables.Ruleset) {
	t.Helper()
	if got, want := ipsetSave(t, setNames(sets)), planSave(sets); got != want {
		t.Errorf("ipset save:\n%s\nplan:\n%s", got, want)
	}
	for _, rs := range rules {
		if got, want := ourRules(t, rs), planRules(rs); got != want {
			t.Errorf("%s iptables-save:\n%s\nplan:\n%s", rs.Family, got, want)
		}
	}
}

func execCount(a *iptables.Syncer) int64 {
	var n int64
	for _, r := range a.RuleRunners() {
		n += r.(counted).Execs()
	}
	return n
}

func TestKernelApplyTamperCleanup(t *testing.T) {
	inNetns(t, func() {
		a, err := kernel.NewSyncer(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		sets, rules := dualStackPlan()

		// Someone else's chain, jump, and ipset.
		run(t, "iptables", "-t", "filter", "-N", "FOO")
		run(t, "iptables", "-t", "filter", "-A", "FOO", "-s", "192.0.2.1", "-j", "DROP")
		run(t, "iptables", "-t", "nat", "-N", "DOCKER")
		run(t, "iptables", "-t", "nat", "-A", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "DOCKER")
		run(t, "ipset", "create", "KUBE-DST-FOREIGN", "hash:ip")
		run(t, "ipset", "add", "KUBE-DST-FOREIGN", "192.0.2.7")
		foreign := func() {
			t.Helper()
			if out := run(t, "iptables-save", "-t", "filter"); !strings.Contains(out, "-A FOO -s 192.0.2.1/32 -j DROP") {
				t.Errorf("foreign chain FOO lost:\n%s", out)
			}
			if out := run(t, "iptables-save", "-t", "nat"); !strings.Contains(out, "-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER") {
				t.Errorf("foreign jump lost:\n%s", out)
			}
			if out := run(t, "ipset", "save", "KUBE-DST-FOREIGN"); !strings.Contains(out, "add KUBE-DST-FOREIGN 192.0.2.7") {
				t.Errorf("foreign set lost:\n%s", out)
			}
		}

		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		checkKernel(t, sets, rules)
		foreign()

		// An unchanged Full runs only the saves: one per family, of both
		// tables.
		before := execCount(a)
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		if n := execCount(a) - before; n != 2 {
			t.Errorf("unchanged Full ran %d binaries, want 2 (iptables-save per family)", n)
		}

		// Partial: one entry in, one out, no exec.
		cl := findSet(sets, iptables.SetClusterIP)
		cl.Entries = []iptables.Entry{cl.Entries[1], {IP: mustAddr("10.96.7.7"), Protocol: model.TCP, Port: 8443}}
		lb := findSet(sets, iptables.SetName(iptables.SetLoadBalancerSourceCIDR, iptables.FamilyIPv6))
		lb.Entries = nil
		before = execCount(a)
		if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		if n := execCount(a) - before; n != 0 {
			t.Errorf("Partial ran %d binaries", n)
		}
		checkKernel(t, sets, rules)

		// Tampering, repaired by the next Full.
		run(t, "iptables", "-t", "nat", "-F", iptables.ChainServices)
		run(t, "iptables", "-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", iptables.ChainServices)
		run(t, "ip6tables", "-t", "nat", "-I", "OUTPUT", "1", "-m", "comment", "--comment", "kubernetes service portals", "-j", iptables.ChainServices)
		run(t, "iptables", "-t", "filter", "-D", iptables.ChainIPVSFilter, "1")
		run(t, "ipset", "del", iptables.SetClusterIP, "10.96.7.7,tcp:8443")
		run(t, "ipset", "add", iptables.SetNodePortTCP, "31111")
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		checkKernel(t, sets, rules)
		foreign()

		// Cleanup: ours only, then nothing.
		empty := append(iptables.EmptySets(iptables.FamilyIPv4), iptables.EmptySets(iptables.FamilyIPv6)...)
		if err := syncErr(a.Cleanup(iptables.Desired{Sets: empty, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		if out := run(t, "iptables-save") + run(t, "ip6tables-save") + run(t, "ipset", "save"); strings.Contains(strings.ReplaceAll(out, "KUBE-DST-FOREIGN", ""), "KUBE-") {
			t.Errorf("left after Cleanup:\n%s", out)
		}
		foreign()
		before = execCount(a)
		if err := syncErr(a.Cleanup(iptables.Desired{Sets: empty, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		if n := execCount(a) - before; n != 2 {
			t.Errorf("second Cleanup ran %d binaries, want only the 2 saves", n)
		}
	})
}

// A restarted proxy adopts what its predecessor left: no rewrite.
func TestKernelRestartAdopts(t *testing.T) {
	inNetns(t, func() {
		sets, rules := dualStackPlan()
		a, err := kernel.NewSyncer(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		a.Close()
		b, err := kernel.NewSyncer(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := syncErr(b.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		for family, r := range b.RuleRunners() {
			if n := r.(counted).Restores(); n != 0 {
				t.Errorf("%s: restart Full rewrote %d tables", family, n)
			}
		}
		checkKernel(t, sets, rules)
	})
}

// The kernel refuses one entry in a batch: the others are applied, the error
// names the refused one, and the mirror does not claim it.
func TestKernelBadEntryInBatch(t *testing.T) {
	inNetns(t, func() {
		a, err := kernel.NewSyncer(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		set := iptables.IPSet{Name: iptables.SetLoadBalancerSourceCIDR, Type: iptables.TypeHashIPPortNet, Family: iptables.FamilyIPv4}
		good1 := iptables.Entry{IP: mustAddr("192.0.2.1"), Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("10.0.0.0/8")}
		bad := iptables.Entry{IP: mustAddr("192.0.2.2"), Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("0.0.0.0/0")}
		good2 := iptables.Entry{IP: mustAddr("192.0.2.3"), Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("10.1.0.0/16")}
		set.Entries = []iptables.Entry{good1, bad, good2}
		err = syncErr(a.Full(iptables.Desired{Sets: []iptables.IPSet{set}, Rules: nil}))
		if !errors.Is(err, iptables.ErrKernel) || !strings.Contains(err.Error(), "192.0.2.2,tcp:80,0.0.0.0/0") {
			t.Fatalf("Full error %v, want ErrKernel naming 192.0.2.2,tcp:80,0.0.0.0/0", err)
		}
		want := []iptables.IPSet{{Name: set.Name, Type: set.Type, Family: set.Family, Entries: []iptables.Entry{good1, good2}}}
		if got, want := ipsetSave(t, setNames(want)), planSave(want); got != want {
			t.Errorf("ipset save:\n%s\nwant:\n%s", got, want)
		}
		if m := a.MirrorEntries(set.Name); len(m) != 2 {
			t.Errorf("mirror holds %v, want the 2 applied entries", m)
		}
	})
}
