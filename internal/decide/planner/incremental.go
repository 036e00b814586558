package planner

import (
	"net/netip"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Incremental plans a node's state service by service. Update plans one
// Service's ports again, and State patches the last state with what that
// changed, so that one EndpointSlice change costs that Service's share and
// a copy of the sorted lists, not a plan of the whole cluster. For the same
// services, options and nodes its State is exactly Plan's, whatever the
// order and number of the updates. Options or nodes that change need a new
// Incremental.
//
// It keeps no reference to the model it is given: a Service's ports and
// endpoints may be dropped or reused once Update returns. Not safe for
// concurrent use.
type Incremental struct {
	env      *env
	services map[types.NamespacedName]*serviceFragment
	// claims are every claim on each key; winners the one that wins it.
	claims  map[ipvs.Key][]*claim
	winners map[ipvs.Key]*claim
	// dups are the DuplicateVirtualServer refusals of each key's losers.
	dups map[ipvs.Key][]model.Refusal
	// dirty are the keys whose claims changed since the last State.
	dirty map[ipvs.Key]struct{}
	// handedOver are the Services that won a key another Service held,
	// since the last TakeHandedOver (handover.go).
	handedOver map[types.NamespacedName]bool
	addrs      counted[netip.Prefix]
	sets       [2][]counted[entryKey]
	refusals   counted[model.Refusal]
	noLocal    noLocalCount
	// realServers counts the winners' real servers: the size of the
	// state's IPVS table without a walk of it.
	realServers int
	// nodeRefusals are the refusals NewIncremental or Reguard was given.
	nodeRefusals []model.Refusal
	st           State
}

// serviceFragment is one Service's share: its ports' plans and the
// conversion's refusals.
type serviceFragment struct {
	ports    []*portPlan
	refusals []model.Refusal
	// guarded are the addresses its ports asked the guard about
	// (portPlan.guarded), sorted: where Reguard looks for addresses whose
	// verdict changed.
	guarded []netip.Addr
	// noLocal is what the Service adds to NoLocalEndpoints.
	noLocal [2]noLocalPolicies
}

// NewIncremental returns an empty plan for these options and nodes;
// refusals (the nodes' conversion refusals, say) are part of every State.
// Nothing in o, nodes or refusals is modified or kept.
func NewIncremental(o Options, nodes []model.Node, refusals []model.Refusal) *Incremental {
	inc := &Incremental{
		env:      newEnv(o, nodes),
		services: map[types.NamespacedName]*serviceFragment{},
		claims:   map[ipvs.Key][]*claim{},
		winners:  map[ipvs.Key]*claim{},
		dups:     map[ipvs.Key][]model.Refusal{},
		dirty:    map[ipvs.Key]struct{}{},
	}
	for f := range inc.sets {
		inc.sets[f] = make([]counted[entryKey], len(iptables.SetSpecs))
	}
	inc.nodeRefusals = slices.Clone(refusals)
	for _, r := range refusals {
		inc.refusals.add(r)
	}
	inc.st = State{VirtualServers: []ipvs.VirtualServer{}, Addresses: []netip.Prefix{}, Refusals: []model.Refusal{},
		Rulesets: inc.env.rulesets}
	inc.st.IPSets = make([]iptables.IPSet, len(inc.env.sets))
	for i, ref := range inc.env.sets {
		inc.st.IPSets[i] = newIPSet(ref, nil)
	}
	return inc
}

// Guard is the node-IP guard this plan refuses addresses with (built from
// its options and nodes by GuardInputs): the address manager asks the
// same one immediately before each bind.
func (inc *Incremental) Guard() *guard.Guard { return inc.env.guard }

// NodePortAddrs are the node addresses NodePorts are served on, sorted, and
// whether --nodeport-addresses restricts them; unrestricted, NodePorts
// answer on every local address. The slice is the plan's own: do not
// modify it.
func (inc *Incremental) NodePortAddrs() (addrs []netip.Addr, restricted bool) {
	return inc.env.npAddrs, inc.env.npRestricted
}

// Update replaces the Service key with ports, whose
// endpoints are looked up in endpoints by port name, and its conversion
// refusals. No ports and no refusals remove the Service.
func (inc *Incremental) Update(key types.NamespacedName, ports []model.ServicePort, endpoints map[model.ServicePortName][]model.Endpoint, refusals []model.Refusal) {
	ps := make([]*model.ServicePort, len(ports))
	for i := range ports {
		ps[i] = &ports[i]
	}
	inc.update(key, ps, endpoints, refusals)
}

func (inc *Incremental) update(key types.NamespacedName, ports []*model.ServicePort, endpoints map[model.ServicePortName][]model.Endpoint, refusals []model.Refusal) {
	if old := inc.services[key]; old != nil {
		for _, pp := range old.ports {
			for _, c := range pp.claims {
				inc.unclaim(c)
			}
			for _, r := range pp.more().refusals {
				inc.refusals.remove(r)
			}
			inc.hold(pp, -1)
		}
		for _, r := range old.refusals {
			inc.refusals.remove(r)
		}
		inc.noLocal.move(old.noLocal, -1)
		delete(inc.services, key)
	}
	if len(ports) == 0 && len(refusals) == 0 {
		return
	}
	frag := &serviceFragment{ports: make([]*portPlan, len(ports)), refusals: slices.Clone(refusals)}
	for i, sp := range ports {
		pp, guarded := inc.env.planPort(sp, endpoints[sp.Name], i, frag.guarded)
		frag.guarded = guarded
		frag.ports[i] = pp
		for _, c := range pp.claims {
			inc.claims[c.vs.Key] = append(inc.claims[c.vs.Key], c)
			inc.dirty[c.vs.Key] = struct{}{}
		}
		for _, r := range pp.more().refusals {
			inc.refusals.add(r)
		}
		inc.hold(pp, +1)
		for f, np := range pp.noLocal {
			frag.noLocal[f] |= np
		}
	}
	slices.SortFunc(frag.guarded, netip.Addr.Compare)
	frag.guarded = slices.Clip(slices.Compact(frag.guarded))
	inc.noLocal.move(frag.noLocal, +1)
	for _, r := range refusals {
		inc.refusals.add(r)
	}
	inc.services[key] = frag
}

// hold adds (d = +1) or removes (d = -1) the set entries a port holds
// while it is planned, won or lost: its healthCheckNodePort.
func (inc *Incremental) hold(pp *portPlan, d int) {
	for _, es := range pp.more().health {
		for _, se := range es {
			inc.sets[se.fam][se.spec].move(se.e, d)
		}
	}
}

func (inc *Incremental) unclaim(c *claim) {
	k := c.vs.Key
	cs := slices.DeleteFunc(inc.claims[k], func(x *claim) bool { return x == c })
	if len(cs) == 0 {
		delete(inc.claims, k)
	} else {
		inc.claims[k] = cs
	}
	inc.dirty[k] = struct{}{}
}

// beats reports whether claim a wins over claim b of the same key: a
// ClusterIP over a NodePort over a LoadBalancer IP over an externalIP,
// then the older Service (creationTimestamp; unknown counts as newest), so
// that a newcomer never takes an address another Service had first, then
// the first service port by (namespace, name, port), then by position.
// Every node and every restart gives the same answer.
func beats(a, b *claim) bool {
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if ac, bc := a.port.created, b.port.created; ac != bc {
		switch {
		case ac == 0:
			return false
		case bc == 0:
			return true
		}
		return ac < bc
	}
	if c := a.port.name.Compare(b.port.name); c != 0 {
		return c < 0
	}
	return a.port.index < b.port.index
}

// resolve picks key k's winner again and moves the state's share of it:
// the address, the set entries, the losers' refusals. It reports whether
// the winner changed.
func (inc *Incremental) resolve(k ipvs.Key) bool {
	cs := inc.claims[k]
	var win *claim
	for _, c := range cs {
		if win == nil || beats(c, win) {
			win = c
		}
	}
	for _, r := range inc.dups[k] {
		inc.refusals.remove(r)
	}
	delete(inc.dups, k)
	var dups []model.Refusal
	for _, c := range cs {
		if c.port == win.port {
			continue
		}
		r := model.Refusal{Subject: model.ServiceSubject(c.port.name.NamespacedName), Field: c.kind.field(), Address: k.Address.String(),
			Reason: model.ReasonDuplicateVirtual,
			Message: string(k.Protocol) + " " + ipvsAddrPort(k) + " is already served by " + strconv.Quote(win.port.name.String()) + " (" + win.kind.field() +
				"); a ClusterIP wins over a NodePort, a LoadBalancer IP and an externalIP, then the oldest Service (metadata.creationTimestamp), then the first by name"}
		dups = append(dups, r)
		inc.refusals.add(r)
	}
	if len(dups) > 0 {
		inc.dups[k] = dups
	}
	old := inc.winners[k]
	if old == win {
		return false
	}
	if old != nil {
		inc.contribute(old, -1)
		delete(inc.winners, k)
	}
	if win != nil {
		inc.contribute(win, +1)
		inc.winners[k] = win
		if old != nil && old.port.name.NamespacedName != win.port.name.NamespacedName {
			inc.handOver(win.port.name.NamespacedName)
		}
	}
	return true
}

// contribute adds (d = +1) or removes (d = -1) a winning claim's address
// and set entries, and its port's hairpin entries with its first win (or
// last loss) in the family.
func (inc *Incremental) contribute(c *claim, d int) {
	if c.bind {
		inc.addrs.move(iptables.HostPrefix(c.vs.Address), d)
	}
	for _, se := range c.entries {
		inc.sets[se.fam][se.spec].move(se.e, d)
	}
	inc.realServers += d * len(c.vs.RealServers)
	f := famOf(c.vs.Address)
	pp := c.port
	before := pp.wins[f]
	pp.wins[f] += int32(d)
	if before == 0 || pp.wins[f] == 0 {
		for _, se := range pp.more().loop[f] {
			inc.sets[se.fam][se.spec].move(se.e, d)
		}
	}
}

// State returns the plan of every Service updated so far. The state is
// shared with the Incremental: treat it as read-only, and use it before the
// next call to State, which may update its virtual servers in place (when
// the changes only replaced virtual servers, as an endpoint change does,
// no list of 10,000 is allocated again). A slice nothing changed in is
// the last State's.
func (inc *Incremental) State() State {
	changed := make([]ipvs.Key, 0, len(inc.dirty))
	for k := range inc.dirty {
		if inc.resolve(k) {
			changed = append(changed, k)
		}
	}
	if len(inc.dirty) > 1024 {
		inc.dirty = map[ipvs.Key]struct{}{}
	} else {
		clear(inc.dirty)
	}
	st := inc.st
	if len(changed) > 0 {
		slices.SortFunc(changed, ipvs.CompareKeys)
		st.VirtualServers = patchVirtualServers(inc.st.VirtualServers, changed, inc.winners)
	}
	st.Addresses = patch(&inc.addrs, inc.st.Addresses, same, model.ComparePrefix)
	if st.Addresses == nil {
		st.Addresses = []netip.Prefix{}
	}
	st.Refusals = patch(&inc.refusals, inc.st.Refusals, same, model.Refusal.Compare)
	if st.Refusals == nil {
		st.Refusals = []model.Refusal{}
	}
	st.IPSets = inc.ipsets()
	inc.st = st
	return st
}

// VirtualServersOf is Service key's share of the last State's virtual
// servers, sorted by key: those its ports' claims win. It is found through
// the Service's own claims, not a walk of the state, so that a partial sync
// picks the changed services' virtual servers at the cost of the change.
// Call it after State; the result is valid until the next State.
func (inc *Incremental) VirtualServersOf(key types.NamespacedName) []ipvs.VirtualServer {
	frag := inc.services[key]
	if frag == nil {
		return nil
	}
	var out []ipvs.VirtualServer
	for _, pp := range frag.ports {
		for _, c := range pp.claims {
			if inc.winners[c.vs.Key] == c {
				out = append(out, c.vs)
			}
		}
	}
	slices.SortFunc(out, func(a, b ipvs.VirtualServer) int { return ipvs.CompareKeys(a.Key, b.Key) })
	return out
}

// RealServers is the number of real servers of the last State's virtual
// servers, kept as winners change rather than counted.
func (inc *Incremental) RealServers() int { return inc.realServers }

// ipsets is every set of the planned families, in name order, with the
// entries patched.
func (inc *Incremental) ipsets() []iptables.IPSet {
	var prev map[setRef][]iptables.Entry
	if len(inc.st.IPSets) == len(inc.env.sets) {
		prev = make(map[setRef][]iptables.Entry, len(inc.env.sets))
		for i, ref := range inc.env.sets {
			prev[ref] = inc.st.IPSets[i].Entries
		}
	}
	same := prev != nil
	out := make([]iptables.IPSet, len(inc.env.sets))
	for i, ref := range inc.env.sets {
		old := prev[ref]
		es := patch(&inc.sets[ref.fam][ref.spec], old, entryKey.entry, iptables.CompareEntries)
		if len(es) == 0 {
			es = nil
		}
		if len(es) != len(old) || len(es) > 0 && &es[0] != &old[0] {
			same = false
		}
		out[i] = newIPSet(ref, es)
	}
	if same {
		return inc.st.IPSets
	}
	return out
}

func newIPSet(ref setRef, es []iptables.Entry) iptables.IPSet {
	spec := iptables.SetSpecs[ref.spec]
	fam := familyNames[ref.fam]
	return iptables.IPSet{Name: iptables.SetName(spec.Name, fam), Type: spec.Type, Family: fam, Comment: spec.Comment, Entries: es}
}

// patchVirtualServers returns old (sorted by key) with the virtual servers
// of the changed keys (sorted) replaced by their winners', or removed or
// inserted. When every changed key is in old and still won, old itself is
// updated in place; otherwise a new slice is merged.
func patchVirtualServers(old []ipvs.VirtualServer, changed []ipvs.Key, winners map[ipvs.Key]*claim) []ipvs.VirtualServer {
	at := make([]int, 0, len(changed))
	for _, k := range changed {
		i, found := slices.BinarySearchFunc(old, k, func(vs ipvs.VirtualServer, k ipvs.Key) int { return ipvs.CompareKeys(vs.Key, k) })
		if !found || winners[k] == nil {
			return mergeVirtualServers(old, changed, winners)
		}
		at = append(at, i)
	}
	for j, k := range changed {
		old[at[j]] = winners[k].vs
	}
	return old
}

// mergeVirtualServers returns a new slice: old (sorted by key) with the
// virtual servers of the changed keys (sorted) replaced by their winners',
// or removed.
func mergeVirtualServers(old []ipvs.VirtualServer, changed []ipvs.Key, winners map[ipvs.Key]*claim) []ipvs.VirtualServer {
	out := make([]ipvs.VirtualServer, 0, len(old)+len(changed))
	i := 0
	for _, k := range changed {
		j, found := slices.BinarySearchFunc(old[i:], k, func(vs ipvs.VirtualServer, k ipvs.Key) int { return ipvs.CompareKeys(vs.Key, k) })
		out = append(out, old[i:i+j]...)
		i += j
		if found {
			i++
		}
		if w := winners[k]; w != nil {
			out = append(out, w.vs)
		}
	}
	return append(out, old[i:]...)
}

// counted is a multiset whose distinct elements are kept as a sorted slice
// outside it: move counts an element in or out, patch applies the elements
// that appeared or disappeared since the last patch to that slice.
type counted[T comparable] struct {
	n map[T]int32
	// was is, for every element whose count went to or from zero since
	// the last patch, whether it was in the slice. Before the first patch
	// nothing is tracked: the slice is empty, every counted element new.
	was     map[T]bool
	patched bool
}

func (c *counted[T]) add(t T)    { c.move(t, +1) }
func (c *counted[T]) remove(t T) { c.move(t, -1) }

func (c *counted[T]) move(t T, d int) {
	if c.n == nil {
		c.n = map[T]int32{}
	}
	n := c.n[t]
	next := n + int32(d)
	if next < 0 {
		next = 0 // removing what was never added: nothing to do
	}
	if c.patched && (n == 0) != (next == 0) {
		if c.was == nil {
			c.was = map[T]bool{}
		}
		if _, ok := c.was[t]; !ok {
			c.was[t] = n > 0
		}
	}
	if next == 0 {
		delete(c.n, t)
	} else {
		c.n[t] = next
	}
}

// same is the identity: what patch turns an element counted as itself into.
func same[T any](t T) T { return t }

// patch returns sorted, the distinct elements of c (as of turns them into)
// at the last patch, with the elements that appeared since inserted and
// those that disappeared removed; sorted itself when none did. The first
// patch is given the empty slice: every counted element is new. of must
// be one to one, and cmp order what it returns.
func patch[K comparable, T any](c *counted[K], sorted []T, of func(K) T, cmp func(a, b T) int) []T {
	if !c.patched {
		c.patched = true
		if len(c.n) == 0 {
			return sorted
		}
		out := make([]T, 0, len(c.n))
		for k := range c.n {
			out = append(out, of(k))
		}
		slices.SortFunc(out, cmp)
		return out
	}
	var ch []T
	for k, was := range c.was {
		if (c.n[k] > 0) != was {
			ch = append(ch, of(k))
		}
	}
	if len(c.was) > 1024 {
		c.was = nil
	} else {
		clear(c.was)
	}
	if len(ch) == 0 {
		return sorted
	}
	slices.SortFunc(ch, cmp)
	out := make([]T, 0, len(sorted)+len(ch))
	i := 0
	for _, t := range ch {
		j, found := slices.BinarySearchFunc(sorted[i:], t, cmp)
		out = append(out, sorted[i:i+j]...)
		i += j
		if found {
			i++ // it disappeared
		} else {
			out = append(out, t) // it appeared
		}
	}
	return append(out, sorted[i:]...)
}
