package iptables_test

import (
	"errors"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
)

func testRules(family string) iptables.Ruleset {
	cidr := netip.MustParsePrefix("10.244.0.0/16")
	if family == iptables.FamilyIPv6 {
		cidr = netip.MustParsePrefix("fd00:244::/64")
	}
	return iptables.Rules(iptables.RulesConfig{Family: family, MasqueradeBit: 14, ClusterCIDR: cidr})
}

type fakeKernel struct {
	sets   *iptablestest.FakeSets
	tables map[string]*iptablestest.FakeRunner
}

func newFakeSyncer(t *testing.T) (*iptables.Syncer, *fakeKernel) {
	t.Helper()
	k := &fakeKernel{sets: iptablestest.NewFakeSets(), tables: map[string]*iptablestest.FakeRunner{iptables.FamilyIPv4: iptablestest.NewFakeRunner(), iptables.FamilyIPv6: iptablestest.NewFakeRunner()}}
	k.sets.Tables = []*iptablestest.FakeRunner{k.tables[iptables.FamilyIPv4], k.tables[iptables.FamilyIPv6]}
	a := iptables.NewSyncerForTest(k.sets, func(f string) (iptables.RuleRunner, error) { return k.tables[f], nil }, nil)
	return a, k
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// plannedSets is EmptySets for inet with a few entries.
func plannedSets() []iptables.IPSet {
	sets := iptables.EmptySets(iptables.FamilyIPv4)
	for i := range sets {
		switch sets[i].Name {
		case iptables.SetClusterIP:
			sets[i].Entries = []iptables.Entry{
				{IP: mustAddr("10.96.0.10"), Protocol: model.UDP, Port: 53},
				{IP: mustAddr("10.96.0.1"), Protocol: model.TCP, Port: 443},
			}
		case iptables.SetLoopBack:
			sets[i].Entries = []iptables.Entry{{IP: mustAddr("10.244.1.5"), Protocol: model.TCP, Port: 8080, Net: netip.MustParsePrefix("10.244.1.5/32")}}
		case iptables.SetNodePortTCP:
			sets[i].Entries = []iptables.Entry{{Port: 30080}, {Port: 30443}}
		case iptables.SetLoadBalancerSourceCIDR:
			sets[i].Entries = []iptables.Entry{{IP: mustAddr("192.0.2.10"), Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("198.51.100.0/24")}}
		}
	}
	return sets
}

func findSet(sets []iptables.IPSet, name string) *iptables.IPSet {
	for i := range sets {
		if sets[i].Name == name {
			return &sets[i]
		}
	}
	return nil
}

func wantSave(sets []iptables.IPSet) string {
	f := iptablestest.NewFakeSets()
	for _, s := range sets {
		_ = f.Create(s, iptables.MaxElemFor(len(s.Entries)))
		_ = f.Add(s, s.Entries)
	}
	return f.SaveText()
}

func TestFullThenPartialEntryDiffs(t *testing.T) {
	a, k := newFakeSyncer(t)
	sets := plannedSets()
	rules := []iptables.Ruleset{testRules(iptables.FamilyIPv4)}
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if got, want := k.sets.SaveText(), wantSave(sets); got != want {
		t.Fatalf("after Full:\n%s\nwant:\n%s", got, want)
	}
	if k.sets.Ops["list"] != 1 {
		t.Errorf("Full dumped the sets %d times, want 1", k.sets.Ops["list"])
	}

	// One endpoint change: a ClusterIP entry goes, another comes.
	sets = plannedSets()
	cl := findSet(sets, iptables.SetClusterIP)
	cl.Entries = []iptables.Entry{cl.Entries[0], {IP: mustAddr("10.96.0.20"), Protocol: model.SCTP, Port: 9}}
	k.sets.Ops = map[string]int{}
	execs := k.tables[iptables.FamilyIPv4].Execs
	if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if got, want := k.sets.SaveText(), wantSave(sets); got != want {
		t.Fatalf("after Partial:\n%s\nwant:\n%s", got, want)
	}
	if want := map[string]int{"add": 1, "del": 1}; !equalOps(k.sets.Ops, want) {
		t.Errorf("Partial ops %v, want %v (no dump, one batched add and del)", k.sets.Ops, want)
	}
	if n := k.tables[iptables.FamilyIPv4].Execs - execs; n != 0 {
		t.Errorf("Partial ran %d iptables binaries, want 0", n)
	}

	// Nothing changed: nothing done.
	k.sets.Ops = map[string]int{}
	if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if len(k.sets.Ops) != 0 {
		t.Errorf("no-op Partial did %v", k.sets.Ops)
	}
}

func equalOps(got, want map[string]int) bool {
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func TestFullRepairsSetsAndSparesForeign(t *testing.T) {
	a, k := newFakeSyncer(t)
	sets := plannedSets()
	// A foreign set, and one of ours left behind with the wrong type.
	k.sets.Sets["KUBE-DST-ABC"] = &iptables.KernelSet{Name: "KUBE-DST-ABC", Type: iptables.TypeHashIP, Family: iptables.FamilyIPv4, Entries: []iptables.Entry{{IP: mustAddr("1.2.3.4")}}}
	k.sets.Sets[iptables.SetIPVSIPs] = &iptables.KernelSet{Name: iptables.SetIPVSIPs, Type: iptables.TypeHashIPPort, Family: iptables.FamilyIPv4, MaxElem: iptables.KubeProxyMaxElem}
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
		t.Fatal(err)
	}
	// The first Full has nothing to compare with: what it fixes is not drift.
	if d := a.LastDrift(); d.Total() != 0 {
		t.Errorf("first Full reported drift %+v", d)
	}
	// Tamper: delete one entry, add a stray one, destroy a set.
	cl := k.sets.Sets[iptables.SetClusterIP]
	cl.Entries = cl.Entries[1:]
	k.sets.Sets[iptables.SetNodePortTCP].Entries = append(k.sets.Sets[iptables.SetNodePortTCP].Entries, iptables.Entry{Port: 31999})
	delete(k.sets.Sets, iptables.SetLoadBalancer)
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if d := a.LastDrift(); !maps.Equal(d, layer.Drift{iptables.DriftIPSetEntry: 2, iptables.DriftIPSet: 1}) {
		t.Errorf("drift %+v, want 2 entries and 1 set", d)
	}
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if d := a.LastDrift(); d.Total() != 0 {
		t.Errorf("drift %+v after the repair, want none", d)
	}
	got := k.sets.SaveText()
	want := wantSave(append(slices.Clone(sets), iptables.IPSet{Name: "KUBE-DST-ABC", Type: iptables.TypeHashIP, Family: iptables.FamilyIPv4, Entries: []iptables.Entry{{IP: mustAddr("1.2.3.4")}}}))
	if got != want {
		t.Fatalf("after repair:\n%s\nwant:\n%s", got, want)
	}

	// Cleanup destroys ours only; a second one is a no-op.
	if err := syncErr(a.Cleanup(iptables.Desired{Sets: iptables.EmptySets(iptables.FamilyIPv4), Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Collect(mapKeys(k.sets.Sets)), []string{"KUBE-DST-ABC"}; !slices.Equal(got, want) {
		t.Fatalf("after Cleanup sets %v, want %v", got, want)
	}
	k.sets.Ops = map[string]int{}
	if err := syncErr(a.Cleanup(iptables.Desired{Sets: iptables.EmptySets(iptables.FamilyIPv4), Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"list": 1}; !equalOps(k.sets.Ops, want) {
		t.Errorf("second Cleanup did %v, want only %v", k.sets.Ops, want)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, k := range slices.Sorted(func(y func(string) bool) {
			for k := range m {
				if !y(k) {
					return
				}
			}
		}) {
			if !yield(k) {
				return
			}
		}
	}
}

func TestBadEntryCostsOnlyItself(t *testing.T) {
	a, k := newFakeSyncer(t)
	sets := plannedSets()
	cl := findSet(sets, iptables.SetClusterIP)
	bad := iptables.Entry{IP: mustAddr("10.96.0.99"), Protocol: model.TCP, Port: 99}
	k.sets.Reject[iptables.SetClusterIP+" "+iptables.FormatEntry(iptables.TypeHashIPPort, bad)] = true
	cl.Entries = append(cl.Entries, bad, iptables.Entry{IP: mustAddr("10.96.0.200"), Protocol: model.TCP, Port: 1})
	err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil}))
	if !errors.Is(err, iptables.ErrKernel) || !strings.Contains(err.Error(), "10.96.0.99,tcp:99") {
		t.Fatalf("Full error %v, want ErrKernel naming the entry", err)
	}
	ks := k.sets.Sets[iptables.SetClusterIP]
	if len(ks.Entries) != 3 {
		t.Fatalf("cluster IP set holds %v, want the 3 good entries", ks.Entries)
	}
	// The mirror does not claim the bad entry: the next Partial retries it.
	delete(k.sets.Reject, iptables.SetClusterIP+" "+iptables.FormatEntry(iptables.TypeHashIPPort, bad))
	if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if len(ks.Entries) != 4 {
		t.Fatalf("after retry the set holds %v, want 4 entries", ks.Entries)
	}
}

func TestWrongFamilyEntryRefused(t *testing.T) {
	a, _ := newFakeSyncer(t)
	sets := plannedSets()
	cl := findSet(sets, iptables.SetClusterIP)
	cl.Entries = append(cl.Entries, iptables.Entry{IP: mustAddr("fd00::1"), Protocol: model.TCP, Port: 1})
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); !errors.Is(err, iptables.ErrInvalidEntry) {
		t.Fatalf("Full error %v, want ErrInvalidEntry", err)
	}
}

func chainRules(rs iptables.Ruleset, table, chain string) []string {
	for _, t := range rs.Tables {
		if t.Name != table {
			continue
		}
		for _, c := range t.Chains {
			if c.Name == chain {
				return iptables.RenderRules(c.Rules)
			}
		}
	}
	return nil
}

// checkChains asserts that every planned chain holds exactly its rules and
// that every built-in chain starts with the planned jumps.
func checkChains(t *testing.T, f *iptablestest.FakeRunner, rs iptables.Ruleset) {
	t.Helper()
	for _, tab := range rs.Tables {
		for _, c := range tab.Chains {
			want := iptables.RenderRules(c.Rules)
			got := f.Tables[tab.Name][c.Name]
			if c.Builtin {
				if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
					t.Errorf("%s %s starts %q, want %q", tab.Name, c.Name, got, want)
				}
				continue
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s %s = %q, want %q", tab.Name, c.Name, got, want)
			}
		}
	}
}

func TestChainsCreatedCheckedRepaired(t *testing.T) {
	a, k := newFakeSyncer(t)
	rs := testRules(iptables.FamilyIPv4)
	f := k.tables[iptables.FamilyIPv4]
	// Someone else's chain and rule, before and after ours.
	f.SetChain("filter", "FOO", "-s 192.0.2.1/32 -j DROP")
	f.SetChain("nat", "DOCKER", "-i docker0 -j RETURN")
	f.Tables["nat"]["PREROUTING"] = []string{"-m addrtype --dst-type LOCAL -j DOCKER"}

	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	checkChains(t, f, rs)

	// An unchanged Full: one save of the family's tables, nothing written.
	f.Execs = 0
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	if f.Execs != 1 {
		t.Errorf("unchanged Full ran %d binaries, want 1 save", f.Execs)
	}
	if d := a.LastDrift(); d.Total() != 0 {
		t.Errorf("unchanged Full reported drift %+v", d)
	}

	// Tamper: flush a chain, delete a jump, duplicate another, reorder rules.
	f.Tables["nat"][iptables.ChainServices] = nil
	f.Tables["nat"]["PREROUTING"] = slices.DeleteFunc(f.Tables["nat"]["PREROUTING"], func(r string) bool { return iptables.RuleTarget(r) == iptables.ChainServices })
	out := f.Tables["nat"]["OUTPUT"]
	f.Tables["nat"]["OUTPUT"] = append(out, out...)
	pr := f.Tables["nat"][iptables.ChainPostrouting]
	slices.Reverse(pr)
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	checkChains(t, f, rs)
	if d := a.LastDrift(); !maps.Equal(d, layer.Drift{iptables.DriftIPTablesTable: 1}) {
		t.Errorf("drift %+v, want the nat table", d)
	}
	if n := strings.Count(strings.Join(f.Tables["nat"]["OUTPUT"], "\n"), iptables.ChainServices); n != 1 {
		t.Errorf("OUTPUT jumps %d times to %s, want 1", n, iptables.ChainServices)
	}
	if got := f.Tables["filter"]["FOO"]; !slices.Equal(got, []string{"-s 192.0.2.1/32 -j DROP"}) {
		t.Errorf("foreign chain FOO changed: %q", got)
	}
	if got := f.Tables["nat"]["DOCKER"]; !slices.Equal(got, []string{"-i docker0 -j RETURN"}) {
		t.Errorf("foreign chain DOCKER changed: %q", got)
	}
	if !slices.Contains(f.Tables["nat"]["PREROUTING"], "-m addrtype --dst-type LOCAL -j DOCKER") {
		t.Errorf("foreign jump in PREROUTING lost: %q", f.Tables["nat"]["PREROUTING"])
	}

	// Partial never runs a binary.
	f.Execs = 0
	if err := syncErr(a.Partial(iptables.Desired{Sets: plannedSets(), Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	if f.Execs != 0 {
		t.Errorf("Partial ran %d binaries", f.Execs)
	}

	// Cleanup removes ours only; the second is a no-op.
	if err := syncErr(a.Cleanup(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	for _, tab := range []string{"nat", "filter"} {
		for c, rules := range f.Tables[tab] {
			if strings.HasPrefix(c, "KUBE-") {
				t.Errorf("%s chain %s survived Cleanup", tab, c)
			}
			for _, r := range rules {
				if strings.Contains(r, "KUBE-") {
					t.Errorf("%s %s rule %q survived Cleanup", tab, c, r)
				}
			}
		}
	}
	if got := f.Tables["nat"]["PREROUTING"]; !slices.Equal(got, []string{"-m addrtype --dst-type LOCAL -j DOCKER"}) {
		t.Errorf("PREROUTING after Cleanup %q", got)
	}
	if _, ok := f.Tables["filter"]["FOO"]; !ok {
		t.Error("Cleanup removed FOO")
	}
	f.Execs = 0
	if err := syncErr(a.Cleanup(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	if f.Execs != 1 {
		t.Errorf("second Cleanup ran %d binaries, want 1 save", f.Execs)
	}
}

// iptables prints some rules differently from how they were written; the
// syncer must learn that and not rewrite the chain at every Full.
func TestCanonicalizedRulesNotRewritten(t *testing.T) {
	a, k := newFakeSyncer(t)
	f := k.tables[iptables.FamilyIPv4]
	f.Canon = func(s string) string { return strings.ReplaceAll(s, "-j MARK --or-mark", "-j MARK --set-xmark") }
	rs := iptables.Ruleset{Family: iptables.FamilyIPv4, Tables: []iptables.Table{{Name: "nat", Chains: []iptables.Chain{
		{Name: "POSTROUTING", Builtin: true, Rules: []iptables.Rule{{"-j", "KUBE-X"}}},
		{Name: "KUBE-X", Rules: []iptables.Rule{{"-m", "comment", "--comment", "two words", "-j", "MARK", "--or-mark", "0x4000"}}},
	}}}}
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	if got := f.Tables["nat"]["KUBE-X"]; !slices.Equal(got, []string{`-m comment --comment "two words" -j MARK --set-xmark 0x4000`}) {
		t.Fatalf("KUBE-X = %q", got)
	}
	f.Execs = 0
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	if f.Execs != 1 {
		t.Errorf("second Full ran %d binaries, want 1 save", f.Execs)
	}
	// A fresh syncer (a restart) adopts the jump rather than rewriting it.
	b := iptables.NewSyncerForTest(k.sets, func(string) (iptables.RuleRunner, error) { return f, nil }, nil)
	f.Execs = 0
	f.Tables["nat"]["POSTROUTING"] = []string{"-j KUBE-X"}
	if err := syncErr(b.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	if got := f.Tables["nat"]["POSTROUTING"]; !slices.Equal(got, []string{"-j KUBE-X"}) {
		t.Errorf("POSTROUTING = %q", got)
	}
}

func TestStaleChainRemoved(t *testing.T) {
	a, k := newFakeSyncer(t)
	f := k.tables[iptables.FamilyIPv4]
	rs := iptables.Ruleset{Family: iptables.FamilyIPv4, Tables: []iptables.Table{{Name: "nat", Chains: []iptables.Chain{
		{Name: "PREROUTING", Builtin: true, Rules: []iptables.Rule{{"-j", "KUBE-A"}, {"-j", "KUBE-B"}}},
		{Name: "KUBE-A", Rules: []iptables.Rule{{"-j", "KUBE-B"}}},
		{Name: "KUBE-B", Rules: []iptables.Rule{{"-j", "RETURN"}}},
	}}}}
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	rs2 := iptables.Ruleset{Family: iptables.FamilyIPv4, Tables: []iptables.Table{{Name: "nat", Chains: []iptables.Chain{
		{Name: "PREROUTING", Builtin: true, Rules: []iptables.Rule{{"-j", "KUBE-A"}}},
		{Name: "KUBE-A", Rules: []iptables.Rule{{"-j", "RETURN"}}},
	}}}}
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs2}})); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Tables["nat"]["KUBE-B"]; ok {
		t.Error("KUBE-B survived though no longer planned")
	}
	if got := f.Tables["nat"]["PREROUTING"]; !slices.Equal(got, []string{"-j KUBE-A"}) {
		t.Errorf("PREROUTING = %q", got)
	}
}

func TestPartialResyncsChainsOnlyWhenRulesChange(t *testing.T) {
	a, k := newFakeSyncer(t)
	f := k.tables[iptables.FamilyIPv4]
	rs := testRules(iptables.FamilyIPv4)
	if err := syncErr(a.Partial(iptables.Desired{Sets: plannedSets(), Rules: []iptables.Ruleset{rs}})); err != nil {
		t.Fatal(err)
	}
	checkChains(t, f, rs)
	f.Execs = 0
	if err := syncErr(a.Partial(iptables.Desired{Sets: plannedSets(), Rules: []iptables.Ruleset{testRules(iptables.FamilyIPv4)}})); err != nil {
		t.Fatal(err)
	}
	if f.Execs != 0 {
		t.Errorf("Partial with the same rules ran %d binaries", f.Execs)
	}
	rs2 := iptables.Rules(iptables.RulesConfig{Family: iptables.FamilyIPv4, MasqueradeBit: 13, MasqueradeAll: true})
	if err := syncErr(a.Partial(iptables.Desired{Sets: plannedSets(), Rules: []iptables.Ruleset{rs2}})); err != nil {
		t.Fatal(err)
	}
	checkChains(t, f, rs2)
}

func TestDiffEntries(t *testing.T) {
	e := func(port uint16) iptables.Entry { return iptables.Entry{Port: port} }
	have := iptables.Normalize(iptables.TypeBitmapPort, []iptables.Entry{e(3), e(1), e(2), e(2)})
	want := iptables.Normalize(iptables.TypeBitmapPort, []iptables.Entry{e(4), e(2)})
	add, del := iptables.DiffEntries(have, want)
	if !slices.Equal(add, []iptables.Entry{e(4)}) || !slices.Equal(del, []iptables.Entry{e(1), e(3)}) {
		t.Errorf("add %v del %v", add, del)
	}
}

// diffSet must agree with normalize+diffEntries for any want, sorted or not.
func TestDiffSetMatchesSlowPath(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	gen := func(n int) []iptables.Entry {
		out := make([]iptables.Entry, n)
		for i := range out {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(rnd.IntN(20))})
			out[i] = iptables.Entry{IP: a, Protocol: model.TCP, Port: uint16(rnd.IntN(3)), Net: netip.PrefixFrom(a, 32)}
		}
		return out
	}
	for range 2000 {
		have := iptables.Normalize(iptables.TypeHashIPPortIP, gen(rnd.IntN(30)))
		want := gen(rnd.IntN(30))
		if rnd.IntN(2) == 0 {
			want = iptables.Normalize(iptables.TypeHashIPPortIP, want)
		}
		if rnd.IntN(4) == 0 && len(want) > 0 {
			want[0].Net = netip.PrefixFrom(want[0].IP, 24) // not canonical for hash:ip,port,ip
		}
		wantNorm := iptables.Normalize(iptables.TypeHashIPPortIP, slices.Clone(want))
		wantAdd, wantDel := iptables.DiffEntries(have, wantNorm)
		add, del, norm := iptables.DiffSet(iptables.TypeHashIPPortIP, have, want)
		if !slices.Equal(add, wantAdd) || !slices.Equal(del, wantDel) || !slices.Equal(norm, wantNorm) {
			t.Fatalf("have %v want %v:\nadd %v del %v norm %v\nexpected add %v del %v norm %v", have, want, add, del, norm, wantAdd, wantDel, wantNorm)
		}
	}
}
