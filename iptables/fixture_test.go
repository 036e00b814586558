package iptables_test

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
)

// The kube-proxy 1.34 fixture (testdata/kube-proxy-1.34/README.md): what its
// IPVS mode leaves on an IPv4-only node, read into the fakes here and
// restored into a real kernel by iptables_kernel_test.go.

const kubeProxyDir = "testdata/kube-proxy-1.34/"

// fixture reads a fixture file without its # comment lines.
func fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(kubeProxyDir + name)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "#") {
			out.WriteString(line)
		}
	}
	return out.String()
}

// fixtureSet is one set of ipset.save: its create options and entries.
type fixtureSet struct {
	set     iptables.IPSet
	maxElem uint32
	initval string
}

// fixtureSets parses ipset.save in file order.
func fixtureSets(t testing.TB) []fixtureSet {
	t.Helper()
	var out []fixtureSet
	idx := map[string]int{}
	for line := range strings.Lines(fixture(t, "ipset.save")) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "create":
			fs := fixtureSet{set: iptables.IPSet{Name: f[1], Type: f[2]}}
			for i := 3; i+1 < len(f); i += 2 {
				switch f[i] {
				case "family":
					fs.set.Family = f[i+1]
				case "maxelem":
					n, _ := strconv.ParseUint(f[i+1], 10, 32)
					fs.maxElem = uint32(n)
				case "initval":
					fs.initval = f[i+1]
				}
			}
			idx[f[1]] = len(out)
			out = append(out, fs)
		case f[0] == "add":
			i, ok := idx[f[1]]
			if !ok {
				t.Fatalf("ipset.save: %q adds to an undeclared set", line)
			}
			e, err := parseEntryText(out[i].set.Type, f[2])
			if err != nil {
				t.Fatalf("ipset.save: %q: %v", line, err)
			}
			out[i].set.Entries = append(out[i].set.Entries, e)
		default:
			t.Fatalf("ipset.save: unexpected line %q", line)
		}
	}
	return out
}

// parseEntryText is AppendEntry's inverse.
func parseEntryText(typ, s string) (iptables.Entry, error) {
	var e iptables.Entry
	if typ == iptables.TypeBitmapPort {
		p, err := strconv.ParseUint(s, 10, 16)
		e.Port = uint16(p)
		return e, err
	}
	parts := strings.Split(s, ",")
	var err error
	if e.IP, err = netip.ParseAddr(parts[0]); err != nil || typ == iptables.TypeHashIP {
		return e, err
	}
	if len(parts) < 2 {
		return e, fmt.Errorf("no proto:port in %q", s)
	}
	proto, port, _ := strings.Cut(parts[1], ":")
	e.Protocol = model.Protocol(proto)
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return e, err
	}
	e.Port = uint16(p)
	if typ == iptables.TypeHashIPPort {
		return e, nil
	}
	if len(parts) < 3 {
		return e, fmt.Errorf("no third part in %q", s)
	}
	if e.Net, err = netip.ParsePrefix(parts[2]); err != nil {
		var a netip.Addr
		if a, err = netip.ParseAddr(parts[2]); err == nil {
			e.Net = netip.PrefixFrom(a, a.BitLen())
		}
	}
	return e, err
}

// newServiceIP is a Service created while kube-proxy was gone: the plan has
// it, kube-proxy's sets do not (the half-programmed Service).
var newServiceIP = mustAddr("10.96.100.6")

// kubeProxyPlan is the proxy's plan for the fixture's node: every IPv4 set
// with kube-proxy's entries, plus newServiceIP:8443/TCP in KUBE-CLUSTER-IP
// and KUBE-IPVS-IPS; the rules of testRules (cluster CIDR 10.244.0.0/16).
func kubeProxyPlan(t testing.TB) ([]iptables.IPSet, []iptables.Ruleset) {
	t.Helper()
	byName := map[string][]iptables.Entry{}
	for _, fs := range fixtureSets(t) {
		byName[fs.set.Name] = fs.set.Entries
	}
	sets := iptables.EmptySets(iptables.FamilyIPv4)
	for i := range sets {
		s := &sets[i]
		s.Entries = append(s.Entries, byName[s.Name]...)
		switch s.Name {
		case iptables.SetClusterIP:
			s.Entries = append(s.Entries, iptables.Entry{IP: newServiceIP, Protocol: model.TCP, Port: 8443})
		case iptables.SetIPVSIPs:
			s.Entries = append(s.Entries, iptables.Entry{IP: newServiceIP})
		}
		s.Entries = iptables.Normalize(s.Type, s.Entries)
	}
	return sets, []iptables.Ruleset{testRules(iptables.FamilyIPv4)}
}

// loadKubeProxy puts the fixture into the fake kernel: every set as
// kube-proxy creates it, and both families' tables.
func loadKubeProxy(t testing.TB, k *fakeKernel) {
	t.Helper()
	for _, fs := range fixtureSets(t) {
		if err := k.sets.CreateExist(fs.set.Name, fs.set.Type, fs.set.Family); err != nil {
			t.Fatal(err)
		}
		if err := k.sets.Add(fs.set, fs.set.Entries); err != nil {
			t.Fatal(err)
		}
	}
	loadSave(t, k.tables[iptables.FamilyIPv4], fixture(t, "iptables.save"))
	loadSave(t, k.tables[iptables.FamilyIPv6], fixture(t, "ip6tables.save"))
}

// loadSave fills a fake family's tables from iptables-save text.
func loadSave(t testing.TB, f *iptablestest.FakeRunner, save string) {
	t.Helper()
	var table string
	rules := map[string][]string{}
	var order []string
	flush := func() {
		for _, c := range order {
			f.SetChain(table, c, rules[c]...)
		}
		rules, order = map[string][]string{}, nil
	}
	for line := range strings.Lines(save) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if _, ok := rules[name]; !ok {
				order = append(order, name)
				rules[name] = nil
			}
		case strings.HasPrefix(line, "-A "):
			name, rest, _ := strings.Cut(line[3:], " ")
			rules[name] = append(rules[name], rest)
		case line == "COMMIT":
			flush()
		}
	}
}

// kubeChainsIn lists the KUBE- chains of an iptables-save and the jumps to
// them from built-in chains, as "table/CHAIN" and "table/BUILTIN -> CHAIN".
func kubeChainsIn(save string) []string {
	var out []string
	var table string
	for line := range strings.Lines(save) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":KUBE-"):
			name, _, _ := strings.Cut(line[1:], " ")
			out = append(out, table+"/"+name)
		case strings.HasPrefix(line, "-A "):
			chain, rest, _ := strings.Cut(line[3:], " ")
			if tgt := iptables.RuleTarget(rest); iptables.IsBuiltinChain(chain) && strings.HasPrefix(tgt, "KUBE-") {
				out = append(out, table+"/"+chain+" -> "+tgt)
			}
		}
	}
	slices.Sort(out)
	return out
}

// takenOverChains4 are the KUBE chains and built-in jumps (kubeChainsIn)
// of an IPv4 node the proxy took over: its own and the kubelet's canaries.
var takenOverChains4 = []string{
	"filter/FORWARD -> KUBE-FORWARD", "filter/FORWARD -> KUBE-PROXY-FIREWALL",
	"filter/INPUT -> KUBE-IPVS-FILTER", "filter/INPUT -> KUBE-NODE-PORT", "filter/INPUT -> KUBE-PROXY-FIREWALL",
	"filter/KUBE-FORWARD", "filter/KUBE-IPVS-FILTER", "filter/KUBE-KUBELET-CANARY", "filter/KUBE-NODE-PORT",
	"filter/KUBE-PROXY-FIREWALL", "filter/KUBE-SOURCE-RANGES-FIREWALL",
	"nat/KUBE-KUBELET-CANARY", "nat/KUBE-LOAD-BALANCER", "nat/KUBE-MARK-MASQ", "nat/KUBE-NODE-PORT",
	"nat/KUBE-POSTROUTING", "nat/KUBE-SERVICES",
	"nat/OUTPUT -> KUBE-SERVICES", "nat/POSTROUTING -> KUBE-POSTROUTING", "nat/PREROUTING -> KUBE-SERVICES",
}

// checkTakenOverChains checks iptables-save and ip6tables-save of the
// fixture's node after a takeover planned IPv4 only: kube-proxy's chains of
// planned names are the proxy's, KUBE-IPVS-OUT-FILTER and its jump are
// gone, no KUBE chain or jump is left in ip6tables, the kubelet's canaries
// stay.
func checkTakenOverChains(t testing.TB, save4, save6 string) {
	t.Helper()
	want4 := takenOverChains4
	if got := kubeChainsIn(save4); !slices.Equal(got, want4) {
		t.Errorf("iptables KUBE chains and jumps:\n%q\nwant (no KUBE-IPVS-OUT-FILTER):\n%q", got, want4)
	}
	if got, want := kubeChainsIn(save6), []string{"filter/KUBE-KUBELET-CANARY", "nat/KUBE-KUBELET-CANARY"}; !slices.Equal(got, want) {
		t.Errorf("ip6tables KUBE chains and jumps %q, want only the kubelet's %q", got, want)
	}
}

// loopBack is KUBE-LOOP-BACK with n entries.
func loopBack(n int) []iptables.Entry {
	out := make([]iptables.Entry, n)
	for i := range out {
		a := netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)})
		out[i] = iptables.Entry{IP: a, Protocol: model.TCP, Port: uint16(8000 + i>>16), Net: netip.PrefixFrom(a, 32)}
	}
	return iptables.Normalize(iptables.TypeHashIPPortIP, out)
}

// syncErr is a sync's error and its failures as one error.
func syncErr(res *iptables.Result, err error) error {
	if err != nil {
		return err
	}
	return res.Err()
}
