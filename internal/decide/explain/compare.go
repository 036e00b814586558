package explain

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Reader reads what the kernel holds of one Service, one key at a time
// (never the whole table): ipvs/kernel, kube-ipvs0 and the ipset netlink
// client on a node, a fake in tests.
type Reader interface {
	// VirtualServer is the virtual server k with its real servers, nil
	// when the kernel has none.
	VirtualServer(k ipvs.Key) (*ipvs.VirtualServer, error)
	// Bound reports whether a is bound on kube-ipvs0.
	Bound(a netip.Addr) (bool, error)
	// Member reports whether set s holds e.
	Member(s iptables.IPSet, e iptables.Entry) (bool, error)
	// Save is `iptables-save` of family (iptables.FamilyIPv4, FamilyIPv6).
	Save(family string) (string, error)
}

// Comparison is how the kernel compares with the plan.
type Comparison struct {
	Matches bool `json:"matches"`
	// Differences say what the kernel lacks or has beyond the plan.
	Differences []string `json:"differences"`
	// Draining are real servers the kernel keeps at weight 0 that the
	// plan no longer has: removed TCP real servers waiting for their
	// connections to end (--ipvs-graceful-period), no difference.
	Draining []string `json:"draining,omitempty"`
}

// checks are what the kernel must hold for the plan to be there.
type checks struct {
	virtualServers []ipvs.VirtualServer
	bound          []netip.Addr
	members        []planner.SetMember
	// protected are addresses of the Service the guard protects: never
	// bound on kube-ipvs0.
	protected []netip.Addr
	// rulesets are the plan's; chains those whose rules match the sets
	// of members ("nat KUBE-SERVICES").
	rulesets []iptables.Ruleset
	chains   map[string][]string
}

// add records a claim the Service wins.
func (c *checks) add(cl planner.ClaimShare) {
	c.virtualServers = append(c.virtualServers, cl.VirtualServer)
	if cl.Bound {
		c.bound = append(c.bound, cl.VirtualServer.Address)
	}
	c.members = append(c.members, cl.Entries...)
}

// Compare reads what the plan expects of the Service through r and records
// the comparison in x.Kernel. Its error is a read that failed.
func (x *Explanation) Compare(r Reader) error {
	cmp := &Comparison{Differences: []string{}}
	for i := range x.checks.virtualServers {
		want := &x.checks.virtualServers[i]
		got, err := r.VirtualServer(want.Key)
		if err != nil {
			return err
		}
		cmp.virtualServer(want, got)
	}
	for _, a := range x.checks.bound {
		ok, err := r.Bound(a)
		if err != nil {
			return err
		}
		if !ok {
			cmp.differ("%s is not bound on kube-ipvs0", a)
		}
	}
	for _, a := range x.checks.protected {
		ok, err := r.Bound(a)
		if err != nil {
			return err
		}
		if ok {
			cmp.differ("%s, which the guard protects, is bound on kube-ipvs0", a)
		}
	}
	for _, m := range x.checks.members {
		ok, err := r.Member(m.Set, m.Entry)
		if err != nil {
			return err
		}
		if !ok {
			cmp.differ("ipset %s lacks %s", m.Set.Name, iptables.AppendEntry(nil, m.Set.Type, m.Entry))
		}
	}
	for i := range x.checks.rulesets {
		rs := &x.checks.rulesets[i]
		names := x.checks.chainsOf(rs.Family)
		if len(names) == 0 {
			continue
		}
		save, err := r.Save(rs.Family)
		if err != nil {
			return err
		}
		for _, c := range iptables.DifferingChains(save, rs, names) {
			cmp.differ("%s chain %s is not as planned", saveCommand(rs.Family), c)
		}
	}
	cmp.Matches = len(cmp.Differences) == 0
	x.Kernel = cmp
	return nil
}

// chainsOf are the chains whose rules match the members' sets of family.
func (c *checks) chainsOf(family string) []string {
	var out []string
	for _, m := range c.members {
		if m.Set.Family != family {
			continue
		}
		for _, ch := range c.chains[m.Set.Name] {
			if !slices.Contains(out, ch) {
				out = append(out, ch)
			}
		}
	}
	return out
}

func saveCommand(family string) string {
	if family == iptables.FamilyIPv6 {
		return "ip6tables-save"
	}
	return "iptables-save"
}

func (c *Comparison) differ(format string, args ...any) {
	c.Differences = append(c.Differences, fmt.Sprintf(format, args...))
}

// virtualServer compares the planned virtual server want with the
// kernel's got.
func (c *Comparison) virtualServer(want, got *ipvs.VirtualServer) {
	name := want.Key.String()
	if got == nil {
		c.differ("virtual server %s is missing", name)
		return
	}
	if got.Scheduler != want.Scheduler || got.Flags&^ipvs.FlagHashed != want.Flags&^ipvs.FlagHashed ||
		got.PersistenceTimeout != want.PersistenceTimeout {
		c.differ("virtual server %s is %q, planned %q", name, save(got), save(want))
	}
	for _, rs := range want.RealServers {
		i := slices.IndexFunc(got.RealServers, func(k ipvs.RealServer) bool { return k.Address == rs.Address && k.Port == rs.Port })
		switch {
		case i < 0:
			c.differ("virtual server %s lacks real server %s", name, netip.AddrPortFrom(rs.Address, rs.Port))
		case got.RealServers[i].Weight != rs.Weight:
			c.differ("virtual server %s has real server %s at weight %d, planned %d", name,
				netip.AddrPortFrom(rs.Address, rs.Port), got.RealServers[i].Weight, rs.Weight)
		}
	}
	for _, k := range got.RealServers {
		if slices.ContainsFunc(want.RealServers, func(rs ipvs.RealServer) bool { return k.Address == rs.Address && k.Port == rs.Port }) {
			continue
		}
		at := netip.AddrPortFrom(k.Address, k.Port)
		if k.Weight == 0 {
			c.Draining = append(c.Draining, name+" "+at.String())
			continue
		}
		c.differ("virtual server %s has real server %s (weight %d) the plan does not", name, at, k.Weight)
	}
}

// save is vs's -A line without its real servers.
func save(vs *ipvs.VirtualServer) string {
	one := *vs
	one.RealServers = nil
	b := ipvs.AppendSave(nil, &one)
	return string(b[:len(b)-1])
}
