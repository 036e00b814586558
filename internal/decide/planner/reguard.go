package planner

import (
	"net/netip"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Reguard moves the plan to options o, nodes and the nodes' refusals when
// they differ from its own only in what the guard protects address by
// address: a Node other than this node's added, deleted or renumbered, the
// API server's addresses, the resolvers. It returns the services that name
// an address the new guard may answer differently for (guard.ChangedAddrs),
// sorted; the caller plans each of them again (Update) before the next
// State, and every other service's plan stands as it is. That is what a
// Node joining a cluster of 10,000 services costs: the services that name
// its addresses, not a plan of all of them.
//
// ok is false, and nothing is changed, when anything else differs: this
// node's own Node (its zone, primary IPs, pod CIDRs), any other option, a
// protection by prefix or by port. A new Incremental is needed then.
func (inc *Incremental) Reguard(o Options, nodes []model.Node, refusals []model.Refusal) (services []types.NamespacedName, ok bool) {
	e := newEnv(o, nodes)
	if !inc.env.sameButGuard(e) {
		return nil, false
	}
	addrs, ok := e.guard.ChangedAddrs(inc.env.guard)
	if !ok {
		return nil, false
	}
	pods := e.guard.ChangedPodRanges(inc.env.guard)
	ne := *inc.env
	ne.o, ne.guard = o, e.guard
	inc.env = &ne
	for _, r := range inc.nodeRefusals {
		inc.refusals.remove(r)
	}
	inc.nodeRefusals = slices.Clone(refusals)
	for _, r := range refusals {
		inc.refusals.add(r)
	}
	if len(addrs) == 0 && len(pods) == 0 {
		return nil, true
	}
	// A walk of the addresses each Service asked the guard about, no
	// index: a Node change is rare beside EndpointSlice changes, the walk
	// costs a small fraction of a plan of every service (BenchmarkReguard
	// against BenchmarkPlan), and an index by address would add to the
	// plan's live memory (BenchmarkMemoryBreakdown).
	for k, frag := range inc.services {
		if namesAny(frag.guarded, addrs) || insideAny(frag.guarded, pods) {
			services = append(services, k)
		}
	}
	slices.SortFunc(services, model.CompareServices)
	return services, true
}

// namesAny reports whether the sorted lists a and b share an address.
func namesAny(a, b []netip.Addr) bool {
	for len(a) > 0 && len(b) > 0 {
		switch c := a[0].Compare(b[0]); {
		case c == 0:
			return true
		case c < 0:
			a = a[1:]
		default:
			b = b[1:]
		}
	}
	return false
}

// insideAny reports whether an address of the sorted list a is inside a
// prefix of ps.
func insideAny(a []netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		i, _ := slices.BinarySearchFunc(a, p.Masked().Addr(), netip.Addr.Compare)
		if i < len(a) && p.Contains(a[i]) {
			return true
		}
	}
	return false
}

// sameButGuard reports whether e and f plan every service port alike but
// for their guards: the same options, apart from those only the guard
// reads, and the same of what the nodes imply for this node.
func (e *env) sameButGuard(f *env) bool {
	a, b := e.o, f.o
	a.APIServerAddrs, a.Resolvers = nil, nil
	b.APIServerAddrs, b.Resolvers = nil, nil
	return e.sched == f.sched && e.families == f.families && e.zone == f.zone &&
		slices.Equal(e.npAddrs, f.npAddrs) && e.npRestricted == f.npRestricted && slices.Equal(e.sets, f.sets) &&
		reflect.DeepEqual(a, b) && reflect.DeepEqual(e.rulesets, f.rulesets)
}
