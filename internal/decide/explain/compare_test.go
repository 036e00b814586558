package explain

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// table is a Reader over a table, a kube-ipvs0 and ipset members kept
// in maps.
type table struct {
	vss     map[ipvs.Key]*ipvs.VirtualServer
	bound   map[netip.Addr]bool
	members map[string]bool
	saves   map[string]string
}

func (r *table) VirtualServer(k ipvs.Key) (*ipvs.VirtualServer, error) { return r.vss[k], nil }
func (r *table) Bound(a netip.Addr) (bool, error)                      { return r.bound[a], nil }
func (r *table) Save(family string) (string, error)                    { return r.saves[family], nil }
func (r *table) Member(s iptables.IPSet, e iptables.Entry) (bool, error) {
	return r.members[s.Name+" "+string(iptables.AppendEntry(nil, s.Type, e))], nil
}

// kernelOf is the kernel holding exactly what x's checks ask for.
func kernelOf(x *Explanation) *table {
	r := &table{vss: map[ipvs.Key]*ipvs.VirtualServer{}, bound: map[netip.Addr]bool{}, members: map[string]bool{}, saves: map[string]string{}}
	for _, rs := range x.checks.rulesets {
		r.saves[rs.Family] = string(iptables.AppendRestore(nil, &rs))
	}
	for _, vs := range x.checks.virtualServers {
		c := vs
		c.RealServers = slices.Clone(vs.RealServers)
		c.Flags |= ipvs.FlagHashed
		r.vss[vs.Key] = &c
	}
	for _, a := range x.checks.bound {
		r.bound[a] = true
	}
	for _, m := range x.checks.members {
		r.members[m.Set.Name+" "+string(iptables.AppendEntry(nil, m.Set.Type, m.Entry))] = true
	}
	return r
}

func TestCompare(t *testing.T) {
	key := ipvs.Key{Protocol: "tcp", Address: netip.MustParseAddr("10.96.0.10"), Port: 80}
	rs := func(a string, w int32) ipvs.RealServer {
		return ipvs.RealServer{Address: netip.MustParseAddr(a), Port: 8080, Weight: w}
	}
	set := iptables.IPSet{Name: iptables.SetClusterIP, Type: iptables.TypeHashIPPort, Family: iptables.FamilyIPv4}
	entry := iptables.Entry{IP: key.Address, Protocol: "tcp", Port: 80}
	protected := netip.MustParseAddr("10.10.0.211")
	newX := func() *Explanation {
		x := &Explanation{}
		x.checks.add(planner.ClaimShare{Bound: true,
			VirtualServer: ipvs.VirtualServer{Key: key, Scheduler: "rr", RealServers: []ipvs.RealServer{rs("10.244.0.5", 1), rs("10.244.1.5", 1)}},
			Entries:       []planner.SetMember{{Set: set, Entry: entry}}})
		x.checks.protected = []netip.Addr{protected}
		x.checks.rulesets = []iptables.Ruleset{iptables.Rules(iptables.RulesConfig{Family: iptables.FamilyIPv4, MasqueradeBit: 14})}
		x.checks.chains = matchingChains(x.checks.rulesets)
		return x
	}
	for _, c := range []struct {
		name    string
		tamper  func(r *table)
		differs []string
		drain   int
	}{
		{"as planned", func(*table) {}, nil, 0},
		{"real server deleted", func(r *table) { r.vss[key].RealServers = r.vss[key].RealServers[:1] },
			[]string{"virtual server -t 10.96.0.10:80 lacks real server 10.244.1.5:8080"}, 0},
		{"weight changed", func(r *table) { r.vss[key].RealServers[0].Weight = 5 },
			[]string{"has real server 10.244.0.5:8080 at weight 5, planned 1"}, 0},
		{"draining real server", func(r *table) { r.vss[key].RealServers = append(r.vss[key].RealServers, rs("10.244.2.5", 0)) }, nil, 1},
		{"extra real server", func(r *table) { r.vss[key].RealServers = append(r.vss[key].RealServers, rs("10.244.2.5", 1)) },
			[]string{"has real server 10.244.2.5:8080 (weight 1) the plan does not"}, 0},
		{"scheduler changed", func(r *table) { r.vss[key].Scheduler = "wrr" },
			[]string{`is "-A -t 10.96.0.10:80 -s wrr", planned "-A -t 10.96.0.10:80 -s rr"`}, 0},
		{"virtual server deleted", func(r *table) { delete(r.vss, key) }, []string{"virtual server -t 10.96.0.10:80 is missing"}, 0},
		{"address unbound", func(r *table) { delete(r.bound, key.Address) }, []string{"10.96.0.10 is not bound on kube-ipvs0"}, 0},
		{"protected address bound", func(r *table) { r.bound[protected] = true },
			[]string{"10.10.0.211, which the guard protects, is bound on kube-ipvs0"}, 0},
		{"entry deleted", func(r *table) { clear(r.members) }, []string{"ipset KUBE-CLUSTER-IP lacks 10.96.0.10,tcp:80"}, 0},
		{"rule deleted", func(r *table) {
			var b strings.Builder
			for line := range strings.Lines(r.saves[iptables.FamilyIPv4]) {
				if !strings.HasPrefix(line, "-A KUBE-SERVICES ") || !strings.Contains(line, "KUBE-CLUSTER-IP") {
					b.WriteString(line)
				}
			}
			r.saves[iptables.FamilyIPv4] = b.String()
		}, []string{"iptables-save chain nat KUBE-SERVICES is not as planned"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newX()
			r := kernelOf(x)
			c.tamper(r)
			if err := x.Compare(r); err != nil {
				t.Fatal(err)
			}
			k := x.Kernel
			if k.Matches != (len(c.differs) == 0) || len(k.Differences) != len(c.differs) || len(k.Draining) != c.drain {
				t.Fatalf("matches %v, differences %q, draining %q; want %q and %d draining", k.Matches, k.Differences, k.Draining, c.differs, c.drain)
			}
			for i, d := range c.differs {
				if !strings.Contains(k.Differences[i], d) {
					t.Errorf("difference %q, want %q", k.Differences[i], d)
				}
			}
		})
	}
}
