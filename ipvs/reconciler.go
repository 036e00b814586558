package ipvs

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// DefaultNodePortRange is Kubernetes' default 30000-32767.
var DefaultNodePortRange = model.PortRange{First: 30000, Last: 32767}

// Options configure a Reconciler.
type Options struct {
	// GracefulPeriod is --ipvs-graceful-period; 0 means DefaultGracefulPeriod.
	GracefulPeriod time.Duration
	// ExcludeCIDRs is --ipvs-exclude-cidrs: virtual servers there are never
	// created, changed or deleted.
	ExcludeCIDRs []netip.Prefix
	// NodePortRange decides which virtual servers on node addresses are
	// NodePort servers, and so ours; zero means DefaultNodePortRange.
	NodePortRange model.PortRange
	// Conntrack deletes the flows of removed UDP and SCTP real servers; nil
	// skips that.
	Conntrack Conntrack
	// Journal records what the kernel cannot show to be ours (see Journal);
	// nil keeps it in memory only, so a restarted process may not adopt an
	// L4 server on a node address or a virtual server whose address it had
	// already unbound.
	Journal Journal
	// Clock tells the time of graceful terminations; nil means the real
	// clock.
	Clock clock.PassiveClock
	// Reader is a second handle on the same table for BeginFull's dump,
	// which runs on another goroutine than the reconciler's; nil means the
	// reconciler's own Table, which must then be safe for concurrent use.
	Reader Table
	// Log is the logger; nil means zap.NewNop().
	Log *zap.Logger
	// Stats keeps the counters of full syncs' reads (stats.go); the zero
	// value keeps none.
	Stats StatsOptions
}

// mirrorVS is what the reconciler believes a virtual server in the kernel
// looks like.
type mirrorVS struct {
	vs      VirtualServer // real servers with kernel weights
	service model.ServicePortName
	// shared is set while vs.RealServers is the list of a desired virtual
	// server (the plan's, read-only: see Full), not the mirror's own copy:
	// a sync that programmed exactly the desired list keeps that list
	// rather than a copy of it. ownRS copies it before the mirror changes it.
	shared bool
	// wanted is the number of the last full sync that desired this
	// virtual server (full.go).
	wanted uint64
	// sum is vs's Digest while summed: a full sync's read compares the
	// kernel with it (BeginFull), and a change of vs clears summed (ownRS,
	// and where the list or the attributes are set anew).
	sum    Digest
	summed bool
}

// digest is m's Digest, computed again only after m changed: at 10,000
// virtual servers a full sync's start would otherwise walk every real
// server of the mirror on the loop.
func (m *mirrorVS) digest() Digest {
	if !m.summed {
		m.sum, m.summed = digestOf(&m.vs), true
	}
	return m.sum
}

// programmed reports whether m is d as the last sync programmed it: the
// same service port and attributes, and d's very real-server list (shared,
// so no real server of it is quiesced or waiting). Then there is nothing
// to do.
func (m *mirrorVS) programmed(d *VirtualServer) bool {
	return m.shared && m.service == d.Service && len(d.RealServers) > 0 && len(m.vs.RealServers) == len(d.RealServers) &&
		&m.vs.RealServers[0] == &d.RealServers[0] && sameService(m.vs, *d)
}

// ownRS makes m's real-server list its own before it is changed.
func (m *mirrorVS) ownRS() {
	m.summed = false
	if m.shared {
		m.vs.RealServers = slices.Clone(m.vs.RealServers)
		m.shared = false
	}
}

// shareRS keeps want (a desired virtual server's real servers) as m's list
// when m's own list holds the same real servers and weights, in any order:
// a list adopted from a dump is in the kernel's order (the newest first),
// which says nothing the mirror needs.
func (m *mirrorVS) shareRS(want []RealServer) {
	if !m.shared && len(want) > 0 && sameRealServers(m.vs.RealServers, want) {
		m.vs.RealServers = slices.Clip(want)
		m.shared = true
	}
}

// Reconciler (a layer.Layer) makes the kernel's IPVS table hold the desired virtual
// servers, touching only what it owns. It keeps a mirror of the owned part
// of the table: Full refreshes it with one table dump; Partial trusts it and
// reads nothing, except the connection counters of real servers that wait
// for graceful termination. It is not safe for concurrent use.
type Reconciler struct {
	t      Table
	opts   Options
	log    *zap.Logger
	mirror map[Key]*mirrorVS
	// grace holds removed TCP real servers at weight 0 and when they were
	// quiesced.
	grace  map[graceKey]time.Time
	synced bool
	// journal is the recorded ownership (Options.Journal's content):
	// addresses whose every virtual server is ours, and single keys.
	journal      ownershipRecord
	journalReady bool
	// journalSaved is false while the journal on disk may differ from
	// journal (a failed Save is retried by the next Record or Settle).
	journalSaved bool
	// touched are the keys created, adopted or deleted (or failed to be)
	// since the last Settle; settleAll asks Settle to look at the whole
	// mirror (after a Full).
	touched   map[Key]bool
	settleAll bool
	// byService files the mirror's keys by service (index.go).
	byService serviceIndex
	// since are the virtual servers written since BeginFull (readback.go);
	// nil when no read is under way.
	since map[Key]bool
	// fulls numbers the full syncs (mirrorVS.wanted).
	fulls uint64
	// inTurn is the number of the full sync whose Turn is running (turn.go),
	// 0 outside one: what a Partial then keeps, that full sync wants.
	inTurn uint64
}

// NewReconciler returns a reconciler over t. Call Full before Partial.
func NewReconciler(t Table, opts Options) *Reconciler {
	if opts.GracefulPeriod == 0 {
		opts.GracefulPeriod = DefaultGracefulPeriod
	}
	if opts.NodePortRange == (model.PortRange{}) {
		opts.NodePortRange = DefaultNodePortRange
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	return &Reconciler{t: t, opts: opts, log: opts.Log, mirror: make(map[Key]*mirrorVS), grace: make(map[graceKey]time.Time),
		journal: ownershipRecord{addrs: map[netip.Addr]bool{}, keys: map[Key]bool{}}, touched: make(map[Key]bool),
		byService: serviceIndex{}}
}

// ErrNotSynced is returned by Partial before the first Full.
var ErrNotSynced = errors.New("ipvs reconciler: Partial before the first Full")

func (r *Reconciler) excluded(a netip.Addr) bool {
	for _, p := range r.opts.ExcludeCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Partial applies only the virtual servers of the changed services
// (d.Changed), with no dump: it creates and updates those in
// d.VirtualServers whose service port changed names, and deletes mirrored virtual servers of those services that are
// no longer desired. Which services changed is the caller's to say
// (internal/drive/applier: the Services the informers saw change, every port;
// none is nothing); desired may be the whole desired state. The changed
// services' mirrored servers are found through an index, not a walk of the
// mirror. It then runs the graceful-termination queue.
func (r *Reconciler) Partial(d Desired) (*Result, error) {
	desired, changed := d.VirtualServers, d.Changed
	if !r.synced {
		return nil, ErrNotSynced
	}
	start := r.opts.Clock.Now()
	match := newChangedSet(changed).has
	res := &Result{}
	want := make(map[Key]bool)
	for i := range desired {
		if !match(desired[i].Service) {
			continue
		}
		want[desired[i].Key] = true
		if m := r.apply(&desired[i], res); m != nil && r.inTurn != 0 {
			m.wanted = r.inTurn
		}
	}
	// The changed services' mirrored servers, through the index: no walk
	// of the mirror.
	var stale []Key
	for _, k := range r.byService.lookup(changed) {
		if !want[k] && match(r.mirror[k].service) {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		r.deleteVS(k, res)
	}
	r.processGrace(start, res)
	r.logResult("partial", res)
	return res, nil
}

// sameRealServers reports whether a and b hold the same real servers with
// the same weights, in any order. The orders a full sync meets most, the
// same (a list the mirror adopted from a dump) and the reverse (a list it
// programmed, which the kernel lists newest first), cost one pass.
func sameRealServers(a, b []RealServer) bool {
	if len(a) != len(b) {
		return false
	}
	if slices.Equal(a, b) || reversed(a, b) {
		return true
	}
	if len(a) <= smallRealServers {
		// A few real servers: compare in place, no map.
		for _, rs := range b {
			if i := slices.IndexFunc(a, func(o RealServer) bool { return o.Address == rs.Address && o.Port == rs.Port }); i < 0 || a[i].Weight != rs.Weight {
				return false
			}
		}
		return true
	}
	w := make(map[netip.AddrPort]int32, len(a))
	for _, rs := range a {
		w[netip.AddrPortFrom(rs.Address, rs.Port)] = rs.Weight
	}
	for _, rs := range b {
		if x, ok := w[netip.AddrPortFrom(rs.Address, rs.Port)]; !ok || x != rs.Weight {
			return false
		}
	}
	return true
}

// reversed reports whether b is a backwards, element by element.
func reversed(a, b []RealServer) bool {
	for i := range a {
		if a[i] != b[len(b)-1-i] {
			return false
		}
	}
	return true
}

// smallRealServers is the longest list sameRealServers compares without a
// map: a full sync compares every owned virtual server's list, most of
// them a few real servers long.
const smallRealServers = 32

// Has reports whether the virtual server is in the kernel as far as the
// mirror knows (created or adopted, and not deleted).
func (r *Reconciler) Has(k Key) bool { return r.mirror[k] != nil }

// Owned returns the mirrored (owned) virtual servers with their real
// servers at the weights last programmed, sorted.
func (r *Reconciler) Owned() []VirtualServer {
	out := make([]VirtualServer, 0, len(r.mirror))
	for _, m := range r.mirror {
		vs := m.vs
		vs.Service = m.service
		vs.RealServers = slices.Clone(vs.RealServers)
		out = append(out, vs)
	}
	slices.SortFunc(out, func(a, b VirtualServer) int { return CompareKeys(a.Key, b.Key) })
	return out
}

// Graceful returns how many real servers wait for graceful termination.
func (r *Reconciler) Graceful() int { return len(r.grace) }

func (m *mirrorVS) findRS(a netip.Addr, port uint16) int {
	return slices.IndexFunc(m.vs.RealServers, func(rs RealServer) bool { return rs.Address == a && rs.Port == port })
}

func sameService(a, b VirtualServer) bool {
	if a.Scheduler != b.Scheduler || (a.Flags&^FlagHashed) != (b.Flags&^FlagHashed) {
		return false
	}
	return a.Flags&FlagPersistent == 0 || a.PersistenceTimeout == b.PersistenceTimeout
}

// apply makes one desired virtual server and its real servers true.
//
// It returns d's mirror entry after the apply, nil when there is none (a
// failure before the kernel held it): a full sync marks it wanted without
// looking it up again.
func (r *Reconciler) apply(d *VirtualServer, res *Result) *mirrorVS {
	r.wrote(d.Key)
	if r.excluded(d.Address) {
		res.fail(d.Service, d.Key, ErrExcluded)
		return r.mirror[d.Key]
	}
	if m := r.mirror[d.Key]; m != nil && m.programmed(d) {
		return m
	}
	m, ok := r.applyService(d, res)
	if !ok {
		return r.mirror[d.Key]
	}
	r.setService(d.Key, m, d.Service)
	m.vs.Service = d.Service
	r.retireRealServers(d, m, r.applyRealServers(d, m, res), res)
	m.shareRS(d.RealServers)
	return m
}

// applyService creates or updates d's virtual server (`ipvsadm -A`/`-E`)
// and returns its mirror entry; false when the kernel refused.
func (r *Reconciler) applyService(d *VirtualServer, res *Result) (*mirrorVS, bool) {
	m := r.mirror[d.Key]
	if m == nil {
		return r.created(d, r.t.AddService(*d), res)
	} else if !sameService(m.vs, *d) {
		if err := r.t.UpdateService(*d); err != nil {
			if !errors.Is(err, ErrNotFound) {
				res.fail(d.Service, d.Key, err)
				return nil, false
			}
			// Deleted behind our back: recreate it from scratch.
			r.forget(d.Key)
			return r.applyService(d, res)
		}
		m.vs.Scheduler, m.vs.Flags, m.vs.PersistenceTimeout = d.Scheduler, d.Flags, d.PersistenceTimeout
		m.summed = false
		res.ServicesUpdated++
	}
	return m, true
}

// applyRealServers adds d's real servers m lacks, all in one
// AddRealServers (`ipvsadm -a` each, one round trip in the kernel), and
// updates changed weights (`ipvsadm -e`), taking quiesced ones back; it
// returns the wanted set. A real server d lists twice is programmed once,
// at its first weight. While m had none and every one is added in order,
// m's list is a prefix of d's, not a copy.
func (r *Reconciler) applyRealServers(d *VirtualServer, m *mirrorVS, res *Result) map[netip.AddrPort]int32 {
	wantRS := make(map[netip.AddrPort]int32, len(d.RealServers))
	fresh := len(m.vs.RealServers) == 0
	// add is what m lacks, in d's order; nil while m had none and that is
	// d's list itself.
	var add []RealServer
	for j, rs := range d.RealServers {
		ap := netip.AddrPortFrom(rs.Address, rs.Port)
		if _, dup := wantRS[ap]; dup {
			if fresh && add == nil {
				add = slices.Clone(d.RealServers[:j])
			}
			continue
		}
		wantRS[ap] = rs.Weight
		if fresh {
			if add != nil {
				add = append(add, rs)
			}
			continue
		}
		switch i := m.findRS(rs.Address, rs.Port); {
		case i < 0:
			add = append(add, rs)
		case m.vs.RealServers[i].Weight != rs.Weight:
			if err := r.t.UpdateRealServer(d.Key, rs); err != nil {
				res.fail(d.Service, d.Key, err)
				continue
			}
			m.ownRS()
			m.vs.RealServers[i].Weight = rs.Weight
			res.RealServersUpdated++
			delete(r.grace, graceKey{Key: d.Key, Addr: rs.Address, Port: rs.Port}) // back in service
		default:
			delete(r.grace, graceKey{Key: d.Key, Addr: rs.Address, Port: rs.Port})
		}
	}
	prefix := fresh && add == nil
	if prefix {
		add = d.RealServers
		m.vs.RealServers, m.shared, m.summed = d.RealServers[:0:0], true, false
	}
	r.addRealServers(d, m, add, prefix, res)
	return wantRS
}

// retireRealServers handles m's real servers d no longer wants: UDP and
// SCTP ones leave at once; TCP ones are quiesced (weight 0) and queued
// for graceful termination.
func (r *Reconciler) retireRealServers(d *VirtualServer, m *mirrorVS, wantRS map[netip.AddrPort]int32, res *Result) {
	for i := 0; i < len(m.vs.RealServers); i++ {
		rs := m.vs.RealServers[i]
		if _, ok := wantRS[netip.AddrPortFrom(rs.Address, rs.Port)]; ok {
			continue
		}
		if d.Protocol != model.TCP {
			if r.deleteRS(m, i, res) {
				i--
			}
			continue
		}
		g := graceKey{Key: d.Key, Addr: rs.Address, Port: rs.Port}
		if rs.Weight != 0 {
			q := rs
			q.Weight = 0
			if err := r.t.UpdateRealServer(d.Key, q); err != nil {
				res.fail(d.Service, d.Key, err)
				continue
			}
			m.ownRS()
			m.vs.RealServers[i].Weight = 0
			res.RealServersUpdated++
			res.Quiesced++
		}
		if _, ok := r.grace[g]; !ok {
			r.grace[g] = r.opts.Clock.Now()
		}
	}
}

// deleteRS removes real server i of m at once (UDP, SCTP, or a TCP one
// whose graceful termination is over) and, for UDP and SCTP, its conntrack
// flows. It reports whether it was removed from the mirror.
func (r *Reconciler) deleteRS(m *mirrorVS, i int, res *Result) bool {
	r.wrote(m.vs.Key)
	rs := m.vs.RealServers[i]
	err := r.t.DelRealServer(m.vs.Key, rs)
	if err != nil && !errors.Is(err, ErrNotFound) {
		res.fail(m.service, m.vs.Key, err)
		return false
	}
	if err == nil {
		res.RealServersDeleted++
	}
	m.ownRS()
	m.vs.RealServers = slices.Delete(m.vs.RealServers, i, i+1)
	delete(r.grace, graceKey{Key: m.vs.Key, Addr: rs.Address, Port: rs.Port})
	if m.vs.Protocol != model.TCP && r.opts.Conntrack != nil {
		r.deleteFlows(m.service, m.vs.Key, rs.Address, res)
	}
	return true
}

// deleteFlows deletes the conntrack flows of real server rs of k (`conntrack
// -D`), counted in res: ConntrackDeleted, and the family's ConntrackRound.
func (r *Reconciler) deleteFlows(service model.ServicePortName, k Key, rs netip.Addr, res *Result) {
	start := r.opts.Clock.Now()
	n, err := r.opts.Conntrack.DeleteFlows(k.Protocol, k.Address, k.Port, rs)
	round := &res.Conntrack[0]
	if !k.Address.Is4() {
		round = &res.Conntrack[1]
	}
	round.Ran = true
	round.Entries += n
	round.Took += r.opts.Clock.Since(start)
	if err != nil {
		res.fail(service, k, err)
		return
	}
	res.ConntrackDeleted++
}

func (r *Reconciler) deleteVS(k Key, res *Result) {
	r.wrote(k)
	m := r.mirror[k]
	r.touched[k] = true
	err := r.t.DelService(k)
	if err != nil && !errors.Is(err, ErrNotFound) {
		res.fail(m.service, k, err)
		return
	}
	if err == nil {
		res.ServicesDeleted++
		r.log.Info("deleted virtual server", zap.Stringer("virtualServer", k), zap.Stringer("service", m.service),
			zap.String("why", "owned by the proxy and no longer desired"))
	}
	r.forget(k)
	for g := range r.grace {
		if g.Key == k {
			delete(r.grace, g)
		}
	}
	if k.Protocol != model.TCP && r.opts.Conntrack != nil {
		for _, rs := range m.vs.RealServers {
			r.deleteFlows(m.service, k, rs.Address, res)
		}
	}
}

func (r *Reconciler) logResult(mode string, res *Result) {
	fields := []zap.Field{
		zap.String("mode", mode),
		zap.Int("servicesAdded", res.ServicesAdded), zap.Int("servicesUpdated", res.ServicesUpdated), zap.Int("servicesDeleted", res.ServicesDeleted),
		zap.Int("realServersAdded", res.RealServersAdded), zap.Int("realServersUpdated", res.RealServersUpdated), zap.Int("realServersDeleted", res.RealServersDeleted),
		zap.Int("quiesced", res.Quiesced), zap.Int("graceful", len(r.grace)), zap.Int("failures", len(res.Failures)),
	}
	if len(res.Failures) > 0 {
		r.log.Warn("ipvs sync incomplete", append(fields, zap.Error(res.Err()))...)
		return
	}
	r.log.Debug("ipvs sync", fields...)
}
