// Package applier makes the kernel hold a planner.State, in a safe order:
//
//  1. dump kube-ipvs0's addresses (one dump, read beside the sync loop in a
//     periodic full sync: FullFrom; a partial sync only when the
//     address manager's watch saw a change by others or lost events, see
//     addrmgr.Manager.Refresh): what is bound now decides,
//     with the node addresses, which virtual servers are ours; what that
//     rule will not show during this sync (virtual servers on unbound
//     addresses, addresses about to be unbound) is journaled first
//     (ipvs.Journal), so a kill -9 at any point leaks nothing;
//  2. unbind addresses no longer desired, and protected ones — before their
//     virtual servers are deleted, so a VIP is never local without one;
//  3. reconcile IPVS (create, update, delete virtual and real servers);
//  4. apply ipsets and iptables rules (the Rules layer itself adds set
//     entries before the rules that refer to them);
//  5. bind new addresses, each checked by the guard immediately before, and
//     only once every virtual server on it exists; then prune the journal;
//  6. in a full sync, remove the DNAT rules another proxy left in front
//     (Taker: kube-proxy's iptables mode), now that the proxy's own state
//     serves every address they served.
//
// A failure of one service never stops the others: the Result lists what
// failed, per service, and the next sync retries. The applier owns no
// kernel access itself; it drives ipvs.Reconciler, addrmgr.Manager and the
// Rules layer (*iptables.Syncer), each through the layers' one contract,
// layer.Layer (layers.go).
package applier

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Rules is the ipset and iptables layer (*iptables.Syncer) under the
// layers' one contract. Each of its syncs adds set entries before rules
// refer to them and removes them after.
type Rules = layer.Layer[iptables.Desired, *iptables.Readback, *iptables.Result]

var _ Rules = (*iptables.Syncer)(nil)

// Applier applies planner states. Not safe for concurrent use.
type Applier struct {
	// Clock times the phases of a sync (Result.Took); New sets the real
	// clock.
	Clock clock.PassiveClock

	ipvs  *ipvs.Reconciler
	addrs *addrmgr.Manager
	rules Rules
	log   *zap.Logger
	// nodeAddrs are the node's own addresses from the last Full.
	nodeAddrs []netip.Addr
	// turning is set while a full sync gives changes a turn (turn.go): the
	// partial syncs then run inside it.
	turning bool
	// arpFrom is the plan's addresses the ARP table last took (arp.go).
	arpFrom prefixes
}

// New returns an applier. rules may be nil: ipsets and iptables are then
// left alone (until the iptables layer is plugged in).
func New(r *ipvs.Reconciler, m *addrmgr.Manager, rules Rules, log *zap.Logger) *Applier {
	if log == nil {
		log = zap.NewNop()
	}
	return &Applier{Clock: clock.RealClock{}, ipvs: r, addrs: m, rules: rules, log: log}
}

// Result is what one sync did and what it could not do.
type Result struct {
	IPVS   *ipvs.Result
	Unbind *addrmgr.Result
	Bind   *addrmgr.Result
	// RulesErr is the Rules layer's error, if any.
	RulesErr error
	// Drift is what this sync found changed in the kernel by others since
	// the proxy last wrote it, and repaired, by kind (ipvs.DriftVirtualServer,
	// addrmgr.DriftAddress, iptables.DriftIPSetEntry ...): a deleted virtual
	// server, an address added to kube-ipvs0 by hand, a flushed chain, a
	// deleted ipset entry. The IPVS and rules kinds are known only in full
	// syncs (partial syncs do not read them); the addresses in every sync.
	Drift layer.Drift
	// Took is how long each phase of the sync took.
	Took Timings
	// Turns are the partial syncs a full sync ran between its steps for
	// the changes that arrived meanwhile (turn.go); their time is in
	// Took.Turns, not in the steps'.
	Turns int
	// AddressesDumped says kube-ipvs0 was read: always in a full sync, in
	// a partial one when the address manager's view was not trusted (see
	// addrmgr.Manager.Refresh).
	AddressesDumped bool
	// Failed maps a service port to why it is not fully programmed; the
	// zero ServicePortName collects failures that belong to no service.
	Failed map[model.ServicePortName][]error
}

// Timings are the durations of a sync's phases, in their order.
type Timings struct {
	// Dump is the kube-ipvs0 address dump (in a partial sync, the check
	// whether one is needed, and the dump if so); Journal the ownership
	// journal's Record and Settle; Unbind, IPVS, Rules and Bind the phases;
	// Turns the partial syncs a full sync gave a turn (Result.Turns).
	Dump, Journal, Unbind, IPVS, Rules, Bind, Turns time.Duration
}

// Add adds u's phases to t's (to average over several syncs).
func (t *Timings) Add(u Timings) {
	t.Dump += u.Dump
	t.Journal += u.Journal
	t.Unbind += u.Unbind
	t.IPVS += u.IPVS
	t.Rules += u.Rules
	t.Bind += u.Bind
	t.Turns += u.Turns
}

// Err joins every failure, or is nil. Guard refusals are not failures.
func (r *Result) Err() error {
	var errs []error
	for _, s := range r.FailedServices() {
		errs = append(errs, r.Failed[s]...)
	}
	return errors.Join(errs...)
}

// FailedServices lists the service ports that failed, sorted (the zero
// one first, for failures of no service).
func (r *Result) FailedServices() []model.ServicePortName {
	if len(r.Failed) == 0 {
		return nil
	}
	out := make([]model.ServicePortName, 0, len(r.Failed))
	for s := range r.Failed {
		out = append(out, s)
	}
	slices.SortFunc(out, model.ServicePortName.Compare)
	return out
}

func (r *Result) add(service model.ServicePortName, err error) {
	if r.Failed == nil {
		r.Failed = map[model.ServicePortName][]error{}
	}
	r.Failed[service] = append(r.Failed[service], err)
}

// Full applies the whole state: it dumps the IPVS table and kube-ipvs0
// once each. nodeAddrs are the node's own addresses (NodePort servers on
// them in the NodePort range are ours). The error is non-nil only when the
// kernel could not be read; then nothing was changed.
func (a *Applier) Full(st *planner.State, nodeAddrs []netip.Addr) (*Result, error) {
	a.nodeAddrs = slices.Clone(nodeAddrs)
	return a.sync(st, true, nil, nil, nil, nil)
}

// Cleanup removes what the proxy owns and nothing else, in a safe order:
// every address on kube-ipvs0 (one dump), then every virtual server the
// ownership rule of ipvs.Ownership calls ours (one IPVS dump; foreign ones
// and --ipvs-exclude-cidrs stay), then the chains and sets named in empty,
// the plan of an empty cluster (planner.Plan of a model.Cluster without
// services). kube-ipvs0 itself stays: addrmgr/kernel.DeleteDevice removes it. The
// error is non-nil only when the kernel could not be read.
func (a *Applier) Cleanup(empty *planner.State, nodeAddrs []netip.Addr) (*Result, error) {
	res := &Result{Bind: &addrmgr.Result{}}
	unbound, err := a.addrs.Cleanup(addrmgr.Desired{})
	if err != nil {
		return nil, err
	}
	res.Unbind = unbound
	for _, f := range res.Unbind.Failures {
		res.add(model.ServicePortName{}, f)
	}
	own := ipvs.Ownership{NodeAddrs: slices.Clone(nodeAddrs)}
	for _, p := range unbound.View {
		own.BoundAddrs = append(own.BoundAddrs, p.Addr())
	}
	if res.IPVS, err = a.ipvs.Cleanup(ipvs.Desired{Own: own}); err != nil {
		return nil, fmt.Errorf("ipvs cleanup: %w", err)
	}
	for _, f := range res.IPVS.Failures {
		res.add(f.ID.Service, f)
	}
	a.settle(res, true)
	if a.rules != nil {
		rres, err := a.rules.Cleanup(iptables.Desired{Sets: empty.IPSets, Rules: empty.Rulesets})
		if err != nil {
			res.RulesErr = err
			res.add(model.ServicePortName{}, fmt.Errorf("%s: %w", iptables.PartCleanup, err))
		} else {
			addRules(res, rres)
		}
		a.cleanupARP(res)
	}
	a.log.Info("cleanup", zap.Int("ipvsChanges", res.IPVS.Changes()), zap.Int("unbound", res.Unbind.Unbound),
		zap.Stringers("failedServices", res.FailedServices()))
	return res, nil
}

// settle prunes the ownership journal to what the kernel still does not
// show, after a sync that may have changed it.
func (a *Applier) settle(res *Result, always bool) {
	if !always && res.IPVS.Changes() == 0 && res.Bind.Bound == 0 && res.Unbind.Unbound == 0 && len(res.Failed) == 0 {
		return
	}
	after := ipvs.Coverage{NodeAddrs: a.nodeAddrs, Bound: a.addrs.Bound}
	if err := a.ipvs.Settle(after); err != nil {
		a.log.Warn("ownership journal not written", zap.Error(err))
	}
}

// Partial applies the virtual servers of the changed Services only (every
// port of each; see ipvs.Reconciler.Partial) and the whole address and
// rule state; IPVS is not read, kube-ipvs0 only when the address manager
// does not trust its view (addrmgr.Manager.Refresh). With no changed
// Service (the sync the address manager's kick asks for) no virtual server
// is touched, and addresses and rules are repaired. It finds the changed
// Services' virtual servers with one walk of st.VirtualServers;
// PartialIndexed, given the planner's index, without.
func (a *Applier) Partial(st *planner.State, changed ...types.NamespacedName) (*Result, error) {
	return a.PartialIndexed(st, walk{st}, changed...)
}

// walk is the Index of a State that has none: one walk of
// st.VirtualServers per Service asked for.
type walk struct{ st *planner.State }

func (w walk) VirtualServersOf(n types.NamespacedName) []ipvs.VirtualServer {
	var out []ipvs.VirtualServer
	for i := range w.st.VirtualServers {
		if w.st.VirtualServers[i].Service.NamespacedName == n {
			out = append(out, w.st.VirtualServers[i])
		}
	}
	return out
}

// Index finds one Service's planned virtual servers without a walk of the
// state: *planner.Incremental, whose last State st is.
type Index interface {
	// VirtualServersOf is the Service's share of st.VirtualServers,
	// sorted by key.
	VirtualServersOf(types.NamespacedName) []ipvs.VirtualServer
}

var _ Index = (*planner.Incremental)(nil)

// PartialIndexed is Partial with the changed Services' virtual servers
// looked up in idx, the index of st: a partial sync costs the change, not
// the number of services.
func (a *Applier) PartialIndexed(st *planner.State, idx Index, changed ...types.NamespacedName) (*Result, error) {
	set := newChangedSet(changed)
	var selected []ipvs.VirtualServer
	for n := range set {
		selected = append(selected, idx.VirtualServersOf(n)...)
	}
	slices.SortFunc(selected, func(a, b ipvs.VirtualServer) int { return ipvs.CompareKeys(a.Key, b.Key) })
	return a.sync(st, false, set, selected, nil, nil)
}

// changedSet reports whether a service port belongs to one of the changed
// Services: the applier's decision, which the reconciler's Partial follows.
type changedSet map[types.NamespacedName]bool

func newChangedSet(changed []types.NamespacedName) changedSet {
	set := make(changedSet, len(changed))
	for _, n := range changed {
		set[n] = true
	}
	return set
}

func (c changedSet) has(n model.ServicePortName) bool { return !n.IsZero() && c[n.NamespacedName] }

// names are the changed Services as the IPVS reconciler takes them: every
// port of each.
func (c changedSet) names() ipvs.Changed {
	out := make(ipvs.Changed, 0, len(c))
	for n := range c {
		out = append(out, model.ServicePortName{NamespacedName: n})
	}
	return out
}

// sync applies st: all of it (full), or the addresses, rules and the
// selected virtual servers, the changed services' share (partial). A full
// sync with a turn gives it a turn between its steps (turn.go) and goes on
// with the state it returns.
func (a *Applier) sync(st *planner.State, full bool, changed changedSet, selected []ipvs.VirtualServer, rb *Readback, turn Turn) (*Result, error) {
	s := &syncRun{a: a, st: st, full: full, changed: changed, rb: rb, turn: turn, res: &Result{}, mark: a.Clock.Now()}
	s.takeTurn()
	read, err := s.dump()
	if err != nil {
		return nil, err
	}
	if full {
		selected = s.st.VirtualServers
	}
	s.record(selected, read.Unwanted)
	s.unbind(read.Unwanted)
	if s.takeTurn() {
		selected = s.st.VirtualServers
	}
	if err := s.reconcileIPVS(selected, read.View); err != nil {
		return nil, err
	}
	s.takeTurn()
	s.syncRules()
	s.takeTurn()
	s.bind()
	if full {
		s.finishTakeover()
	}
	if !a.turning {
		// A partial sync inside a full sync's turn leaves the journal as
		// it is: the full sync journaled virtual servers its walk may not
		// have created yet, which a prune to the mirror would drop; its
		// own settle, at its end, prunes what both left.
		a.settle(s.res, full)
	}
	s.lap(&s.res.Took.Journal)
	s.logResult()
	return s.res, nil
}

// syncRun is one sync on its way through the safe order: dump, record,
// unbind, IPVS, ipsets and iptables, bind, settle.
type syncRun struct {
	a       *Applier
	st      *planner.State
	full    bool
	changed changedSet
	// rb, in a full sync, is the IPVS table read off the loop (FullFrom);
	// nil: the sync reads it.
	rb *Readback
	// turn, in a full sync from rb, runs the changes waiting (turn.go).
	turn Turn
	res  *Result
	// mark is when the step being timed began.
	mark time.Time
	// byAddrMap is who asked for each address, built when byAddr does not
	// find an address by binary search.
	byAddrMap map[netip.Addr][]*ipvs.VirtualServer
}

// lap adds the time since the last lap to d.
func (s *syncRun) lap(d *time.Duration) {
	now := s.a.Clock.Now()
	*d += now.Sub(s.mark)
	s.mark = now
}

// byAddr is who asked for addr, to attribute address failures and to know
// when an address is ready to bind: the run of st.VirtualServers on addr,
// found by binary search (they are sorted by ipvs.CompareKeys, address
// first), so a partial sync that binds one new address pays for that
// address. An address no virtual server is found on (which a planned state
// does not have) is looked up again in a map of the whole state, built
// once.
func (s *syncRun) byAddr(addr netip.Addr) []*ipvs.VirtualServer {
	vss := s.st.VirtualServers
	i, _ := slices.BinarySearchFunc(vss, addr, func(vs ipvs.VirtualServer, a netip.Addr) int { return vs.Address.Compare(a) })
	var out []*ipvs.VirtualServer
	for ; i < len(vss) && vss[i].Address == addr; i++ {
		out = append(out, &vss[i])
	}
	if len(out) > 0 {
		return out
	}
	if s.byAddrMap == nil {
		s.byAddrMap = make(map[netip.Addr][]*ipvs.VirtualServer, len(s.st.Addresses))
		for i := range vss {
			vs := &vss[i]
			s.byAddrMap[vs.Address] = append(s.byAddrMap[vs.Address], vs)
		}
	}
	return s.byAddrMap[addr]
}

// servicesOf are the service ports with a virtual server on addr, sorted;
// the zero one alone for none.
func (s *syncRun) servicesOf(addr netip.Addr) []model.ServicePortName {
	var out []model.ServicePortName
	for _, vs := range s.byAddr(addr) {
		out = append(out, vs.Service)
	}
	slices.SortFunc(out, model.ServicePortName.Compare)
	out = slices.Compact(out)
	if len(out) == 0 {
		out = []model.ServicePortName{{}}
	}
	return out
}

// record journals what kube-ipvs0 will not show to be ours while this sync
// runs, before the first change: the addresses about to be unbound
// (unwanted), and desired virtual servers on addresses not bound through
// the sync.
func (s *syncRun) record(selected []ipvs.VirtualServer, unwanted []addrmgr.Unwanted) {
	a := s.a
	leaving := make(map[netip.Addr]bool, len(unwanted))
	leavingList := make([]netip.Addr, 0, len(unwanted))
	for _, u := range unwanted {
		leaving[u.Prefix.Addr()] = true
		leavingList = append(leavingList, u.Prefix.Addr())
	}
	during := ipvs.Coverage{NodeAddrs: a.nodeAddrs, Bound: func(addr netip.Addr) bool { return a.addrs.Bound(addr) && !leaving[addr] }}
	if err := a.ipvs.Record(selected, during, leavingList); err != nil {
		a.log.Warn("ownership journal not written: a restart after a crash may not adopt every virtual server", zap.Error(err))
	}
	s.lap(&s.res.Took.Journal)
}

// unbind removes the unwanted addresses, before any virtual server goes.
func (s *syncRun) unbind(unwanted []addrmgr.Unwanted) {
	res := s.res
	res.Unbind = s.a.addrs.Remove(unwanted)
	s.lap(&res.Took.Unbind)
	for _, f := range res.Unbind.Failures {
		for _, svc := range s.servicesOf(f.ID.Prefix.Addr()) {
			res.add(svc, f)
		}
	}
}

// bind binds each desired address whose virtual servers all exist.
func (s *syncRun) bind() {
	a, res := s.a, s.res
	ready := func(addr netip.Addr) bool {
		for _, vs := range s.byAddr(addr) {
			if !a.ipvs.Has(vs.Key) {
				return false
			}
		}
		return true
	}
	res.Bind = a.addrs.Bind(s.st.Addresses, ready)
	if a.turning {
		// Inside a full sync's turn, an address whose virtual servers are
		// not all there yet is the full sync's to bind, after its IPVS
		// walk, or to report: a changed service whose virtual server
		// failed has that failure from the IPVS step.
		res.Bind.Failures = slices.DeleteFunc(res.Bind.Failures, func(f addrmgr.Failure) bool { return errors.Is(f.Err, addrmgr.ErrNotReady) })
	}
	for _, f := range res.Bind.Failures {
		for _, svc := range s.servicesOf(f.ID.Prefix.Addr()) {
			res.add(svc, f)
		}
	}
	s.lap(&res.Took.Bind)
}

// logResult logs the sync: a warning when it is incomplete.
func (s *syncRun) logResult() {
	res := s.res
	mode := "partial"
	if s.full {
		mode = "full"
	}
	fields := []zap.Field{zap.String("mode", mode), zap.Int("ipvsChanges", res.IPVS.Changes()),
		zap.Int("bound", res.Bind.Bound), zap.Int("unbound", res.Unbind.Unbound),
		zap.Int("refusedBinds", len(res.Bind.Refused)), zap.Stringers("failedServices", res.FailedServices()),
		zap.Bool("addressesDumped", res.AddressesDumped), zap.Duration("dumpTook", res.Took.Dump), zap.Duration("journalTook", res.Took.Journal), zap.Duration("unbindTook", res.Took.Unbind),
		zap.Duration("ipvsTook", res.Took.IPVS), zap.Duration("rulesTook", res.Took.Rules), zap.Duration("bindTook", res.Took.Bind)}
	if s.rb != nil {
		fields = append(fields, zap.Duration("readbackTook", s.rb.Took), zap.Duration("readIPVSTook", s.rb.TookIPVS),
			zap.Duration("readAddrsTook", s.rb.TookAddrs), zap.Duration("readRulesTook", s.rb.TookRules))
	}
	if err := res.Err(); err != nil {
		s.a.log.Warn("sync incomplete", append(fields, zap.Error(err))...)
	} else {
		s.a.log.Debug("sync applied", fields...)
	}
}
