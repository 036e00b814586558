package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/internal/health"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
)

// ErrCacheSync is returned by Run when the context ended before the
// informer caches synced: nothing was applied.
var ErrCacheSync = errors.New("informer caches did not sync")

// Source is where the loop learns what changed: *informers.Watcher.
type Source interface {
	// WaitForCacheSync blocks until every cache holds its first full list.
	WaitForCacheSync(ctx context.Context) bool
	// Notify receives a value whenever changes are waiting (coalesced).
	Notify() <-chan struct{}
	// TakeChanges returns and clears the changes since the last call.
	TakeChanges() informers.Changes
	// Requeue marks services changed again.
	Requeue(keys []types.NamespacedName)
	// Pending is the number of changed services not yet taken.
	Pending() int
	// ServiceNames lists every cached Service.
	ServiceNames() []types.NamespacedName
	// Service converts one Service with its EndpointSlices; a Service that
	// is gone or skipped gives nothing.
	Service(key types.NamespacedName) ([]model.ServicePort, map[model.ServicePortName][]model.Endpoint, []model.Refusal)
	// Nodes converts every cached Node.
	Nodes() ([]model.Node, []model.Refusal)
	// APIServerEndpoints are the addresses of the default/kubernetes
	// EndpointSlices: the API server instances.
	APIServerEndpoints() []netip.Addr
	// IsServiceIP reports whether an address is a cached Service's ClusterIP.
	IsServiceIP(a netip.Addr) bool
	// ServiceIPs are the cached Services' ClusterIPs, sorted.
	ServiceIPs() convert.AddrSet
}

// Applier makes the kernel hold a planner.State: *applier.Applier.
type Applier interface {
	// Full reads the kernel and repairs everything.
	Full(st *planner.State, nodeAddrs []netip.Addr) (*applier.Result, error)
	// Partial touches the virtual servers of the changed services only,
	// found through idx (the incremental plan st comes from), not a walk
	// of st.
	Partial(st *planner.State, idx applier.Index, changed ...types.NamespacedName) (*applier.Result, error)
}

// Backoff defaults for a failed apply.
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 30 * time.Second
)

// Loop is the sync loop. Fill the fields, then call Run once.
type Loop struct {
	// Source and Applier are required.
	Source  Source
	Applier Applier
	// Env reads the node's addresses and gateways (full: a full sync, read
	// everything from the kernel, nothing cached); nil means none.
	Env func(full bool) (nodeenv.Env, error)
	// Options are the planning options; NodeName set, the Env fields and
	// APIServerAddrs are filled in at each sync.
	Options planner.Options
	// APIServer is the host the proxy dials (Dialed, InCluster); each full
	// sync adds the Source's API server endpoints and Service IPs, and
	// protects what guard.APIServer.Addrs says (with Options.APIServerAddrs).
	APIServer guard.APIServer
	// OnPlan, if set, is called with the guard and the state of every full
	// sync and of every sync that moved the plan to a new guard
	// (SyncReport.Reguarded), before it is applied: the address manager's
	// guard is the planner's through it. Other partial syncs plan with the
	// same guard.
	OnPlan func(g *guard.Guard, st *planner.State)
	// Observe, if set, is called at the very end of every sync, after its
	// health, metrics and Events bookkeeping, with the sync's report and
	// the loop's counts so far: a test that waits for it knows the loop has
	// recorded everything the sync decided.
	Observe func(rep SyncReport, stats Stats)

	// Critical are the Services the first sync after the caches synced
	// serves before all others, after default/kubernetes
	// (--critical-services); none means the Source's cluster DNS
	// (critical.go).
	Critical []types.NamespacedName

	// Kick, if set, asks for a sync soon although no service changed: the
	// address manager sends on it when others changed kube-ipvs0, and the
	// partial sync that follows reads it again and repairs it.
	Kick <-chan struct{}

	// SyncPeriod is --sync-period (full resync); MinSyncPeriod is
	// --min-sync-period (minimum time between two syncs).
	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	// BackoffInitial and BackoffMax bound the retry delay after a failed
	// apply; zero means the defaults (capped at SyncPeriod).
	BackoffInitial, BackoffMax time.Duration

	// Optional observers; nil ones are skipped.
	Events   *events.Refusals
	Health   *health.Proxy
	Services *health.Services
	Metrics  *metrics.Metrics

	Clock clock.Clock
	Log   *zap.Logger

	// state of the running loop
	started   time.Time // Run's start: older trigger times are not measured
	lastStart time.Time
	nextFull  time.Time
	retryAt   time.Time
	backoff   time.Duration
	needFull  bool
	dirty     bool
	kicked    bool
	stats     Stats
	// firstFullDone is set by the first full sync that applied everything
	// (logged once, with what it programmed).
	firstFullDone bool
	// cachesSynced is when the caches synced; criticalDone is set once the
	// critical Services had their sync (critical.go).
	cachesSynced time.Time
	criticalDone bool
	// plan is the incremental plan: rebuilt from every cached service by a
	// full sync or when the node's addresses changed, updated with the
	// changed services only by a partial sync.
	plan *planner.Incremental
	// planned are the options plan was built with, env the node as read
	// for it, nodes its nodes and nodeRefusals what was refused of them.
	planned      planner.Options
	env          nodeenv.Env
	nodes        []model.Node
	nodeRefusals []model.Refusal
	// health are the healthCheckNodePort servers each service asks for.
	health map[types.NamespacedName][]healthPort
	// noLocal is the last plan's kube-proxy no-local-endpoints count.
	noLocal [2]planner.NoLocal
	// counted are the refusals the refusal metrics were last set from.
	counted []model.Refusal
	// reading receives the kernel read of the periodic full sync under
	// way (Readbacker), nil when none; read is what it returned, for the
	// full sync that is then due.
	reading chan readResult
	read    *readResult
	// nodesWaiting: a full sync's turn took a Node change with the
	// services it applied (turn.go); the next sync takes it.
	nodesWaiting bool
}

// Stats count what the loop did; Run's caller may read them after Run
// returns, tests while it runs through the Observe hook.
type Stats struct {
	Full, Partial, Failed int
}

// SyncReport describes one sync, for logs and tests.
type SyncReport struct {
	Full bool
	// Replanned: every service was planned again (a full sync whose
	// inputs other than the changed services changed, or the first);
	// otherwise the changed services alone were.
	Replanned bool
	// Reguarded: the Nodes or the API server's addresses changed and the
	// plan took them without planning every service again
	// (planner.Incremental.Reguard); the services naming an address whose
	// protection changed are among Services.
	Reguarded bool
	// Services are the services planned (unless Replanned) and, in a
	// partial sync, applied: the changed ones and those Reguard named.
	Services []types.NamespacedName
	Duration time.Duration
	// Stages split Duration, and say how long the changes waited for it.
	Stages Stages
	// Turns are the partial syncs this full sync ran between its steps
	// for the changes that arrived meanwhile (turn.go), each reported
	// before it; their time is in Duration.
	Turns int
	Err   error // nil when everything was applied
}

func (l *Loop) defaults() {
	if l.Clock == nil {
		l.Clock = clock.RealClock{}
	}
	if l.Log == nil {
		l.Log = zap.NewNop()
	}
	if l.BackoffInitial <= 0 {
		l.BackoffInitial = DefaultBackoffInitial
	}
	if l.BackoffMax <= 0 {
		l.BackoffMax = DefaultBackoffMax
	}
	if l.SyncPeriod > 0 && l.BackoffMax > l.SyncPeriod {
		l.BackoffMax = l.SyncPeriod
	}
	if l.BackoffInitial > l.BackoffMax {
		l.BackoffInitial = l.BackoffMax
	}
}

// Run waits for the caches, runs the first full sync, and then syncs on
// every change and every SyncPeriod until ctx ends. It returns nil when ctx
// ends after the caches synced, ErrCacheSync before. It never undoes what
// it applied.
func (l *Loop) Run(ctx context.Context) error {
	l.defaults()
	l.started = l.Clock.Now()
	l.Log.Info("waiting for the informer caches (Services, EndpointSlices, Nodes) to list from the API server; nothing is applied before")
	if !l.Source.WaitForCacheSync(ctx) {
		return ErrCacheSync
	}
	l.cachesSynced = l.Clock.Now()
	l.Log.Info("informer caches synced; starting the first full sync")
	l.needFull = true
	l.dirty = true
	timer := l.Clock.NewTimer(0)
	defer timer.Stop()
	for {
		now := l.Clock.Now()
		if wait, ok := l.due(now); ok {
			l.syncOnce()
			continue
		} else if wait >= 0 {
			if !timer.Stop() {
				select {
				case <-timer.C():
				default:
				}
			}
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			l.Log.Info("sync loop stopped; the data plane is left as it is", zap.Int("fullSyncs", l.stats.Full),
				zap.Int("partialSyncs", l.stats.Partial), zap.Int("failedSyncs", l.stats.Failed))
			return nil
		case <-l.Source.Notify():
			l.dirty = true
		case <-l.Kick:
			l.dirty, l.kicked = true, true
		case r := <-l.reading:
			l.reading = nil
			if r.err != nil {
				l.Log.Warn("reading the kernel beside the loop for the periodic full sync failed; the full sync reads it itself", zap.Error(r.err))
			}
			l.read, l.needFull = &r, true
		case <-timer.C():
		}
	}
}

// due says whether a sync should run now; if not, how long until the
// next reason to look again (negative: only a change can make one due).
func (l *Loop) due(now time.Time) (time.Duration, bool) {
	if !l.nextFull.IsZero() && !now.Before(l.nextFull) && !l.needFull {
		l.periodicFull()
	}
	want := l.needFull || l.dirty
	if !want {
		if l.nextFull.IsZero() || l.reading != nil {
			// Only a change, or the periodic full sync's read coming
			// back, makes a sync due.
			return -1, false
		}
		return l.nextFull.Sub(now), false
	}
	earliest := l.retryAt
	if !l.lastStart.IsZero() && l.MinSyncPeriod > 0 {
		if t := l.lastStart.Add(l.MinSyncPeriod); t.After(earliest) {
			earliest = t
		}
	}
	if now.Before(earliest) {
		return earliest.Sub(now), false
	}
	return 0, true
}

// Stats returns what the loop did so far. Only safe after Run returned or
// from an observer called by the loop itself.
func (l *Loop) Stats() Stats { return l.stats }

// syncOnce takes the changes and applies them, fully or partially.
func (l *Loop) syncOnce() {
	full := l.needFull
	changes := l.takeChanges()
	kicked := l.kicked
	l.dirty, l.kicked = false, false
	if !full && changes.Empty() && !kicked {
		return
	}
	start := l.Clock.Now()
	l.lastStart = start
	rep := SyncReport{Full: full, Services: changes.Services}
	rep.Stages.waited(changes, start)
	sw := newStopwatch(l.Clock)
	o, env, err := l.options(full || l.plan == nil, &rep.Stages)
	sw.lap(&rep.Stages.Env)
	if err == nil && !full && (l.plan == nil || !sameEnv(&env, &l.env)) {
		// Every service's NodePorts and guard decisions may change with
		// the node's addresses: plan and apply everything.
		if l.plan != nil {
			l.Log.Info("the node's addresses changed; planning and applying everything")
		}
		full = true
	}
	var nodes nodeInputs
	if full || changes.Nodes {
		o.APIServerAddrs = l.apiServerAddrs()
		// A resolver that is a Service's ClusterIP (a node pointed at the
		// cluster DNS) is a VIP like any other.
		o.Resolvers = slices.DeleteFunc(slices.Clone(env.Resolvers), l.Source.IsServiceIP)
		nodes.nodes, nodes.refusals = l.Source.Nodes()
		// The trust order: what the API server allocated outranks what a
		// Node claims (guard.TrustNodes).
		nodes.nodes, nodes.refusals = planner.TrustedNodes(&o, nodes.nodes, nodes.refusals, l.Source.ServiceIPs())
		if err == nil {
			// A node that could not be read is planned for again once it can.
			var reguarded []types.NamespacedName
			rep.Replanned, rep.Reguarded, reguarded = l.replan(&o, &env, &nodes)
			// Nodes that Reguard cannot take (this node's own changed)
			// make this a full sync that plans everything.
			full = full || rep.Replanned
			if len(reguarded) > 0 {
				rep.Services = mergeNames(changes.Services, reguarded)
			}
		}
	}
	if full {
		l.needFull = false
		l.nextFull = start.Add(l.SyncPeriod)
		l.env = env
	}
	if l.Metrics != nil {
		l.Metrics.PendingChanges.Set(float64(l.Source.Pending()))
	}

	rep.Full = full
	var st *planner.State
	var res *applier.Result
	if err == nil {
		st, res, err = l.apply(&rep, o, nodes, &sw)
	}
	l.conclude(&rep, start, changes, st, res, err)
}

// takeChanges takes the changes waiting, with a Node change a full sync's
// turn left (nodesWaiting).
func (l *Loop) takeChanges() informers.Changes {
	// A notification sent before this take is answered by it.
	select {
	case <-l.Source.Notify():
	default:
	}
	changes := l.Source.TakeChanges()
	if l.nodesWaiting {
		changes.Nodes, l.nodesWaiting = true, false
	}
	return changes
}

// options are the planning options of this sync: l.Options with the
// node's addresses and routes read now (env, as read), and the API server's
// addresses and the resolvers as last planned (a full sync asks the Source
// again).
func (l *Loop) options(full bool, stages *Stages) (planner.Options, nodeenv.Env, error) {
	o := l.Options
	o.APIServerAddrs, o.Resolvers = l.planned.APIServerAddrs, l.planned.Resolvers
	var env nodeenv.Env
	if l.Env != nil {
		var err error
		if env, err = l.nodeEnv(full, stages); err != nil {
			return o, env, fmt.Errorf("read the node's addresses: %w", err)
		}
		// Link-local addresses only where --nodeport-addresses names them,
		// as plan gets them from --node-ip.
		env = env.WithNodePortCIDRs(o.NodePortAddresses)
		o.LocalAddrs, o.LocalPrefixes, o.Gateways, o.NextHops = env.LocalAddrs, env.LocalPrefixes, env.Gateways, env.NextHops
		o.Listeners = env.Listeners
	}
	return o, env, nil
}

// apply plans with o and applies: a full sync that replans (rep.Replanned)
// plans every service again into a new plan, with nodes; any other sync
// only the changed services (rep.Services). A full sync applies the whole
// state, the others the changed services' share. sw (nil: none) times its
// steps into rep.Stages.
func (l *Loop) apply(rep *SyncReport, o planner.Options, nodes nodeInputs, sw *stopwatch) (*planner.State, *applier.Result, error) {
	full, changed, stages := rep.Full, rep.Services, &rep.Stages
	if rep.Replanned {
		l.nodes, l.nodeRefusals = nodes.nodes, nodes.refusals
		l.plan = planner.NewIncremental(o, l.nodes, l.nodeRefusals)
		l.planned = o
		l.health = map[types.NamespacedName][]healthPort{}
		changed = l.Source.ServiceNames()
		if !l.criticalDone {
			l.serveCritical(changed)
		}
	}
	for _, k := range changed {
		ports, eps, refusals := l.Source.Service(k)
		l.plan.Update(k, ports, eps, refusals)
		if hp := serviceHealth(ports, eps, o.NodeName); len(hp) > 0 {
			l.health[k] = hp
		} else {
			delete(l.health, k)
		}
	}
	st := l.plan.State()
	// A Service that won a virtual server a changed one let go is
	// applied with it (planner.Incremental.TakeHandedOver).
	if handed := l.plan.TakeHandedOver(); len(handed) > 0 && !full {
		changed = mergeNames(changed, handed)
	}
	l.noLocal = l.plan.NoLocalEndpoints()
	if l.OnPlan != nil && (full || rep.Reguarded) {
		l.OnPlan(l.plan.Guard(), &st)
	}
	sw.lap(&stages.Plan)
	if l.Services != nil {
		l.Services.Restrict(l.plan.NodePortAddrs())
		for _, err := range l.Services.Sync(mergeHealth(l.health)) {
			l.Log.Warn("health check node port", zap.Error(err))
		}
	}
	sw.lap(&stages.Health)
	var res *applier.Result
	var err error
	// The state the sync ends with: a periodic full sync's last turn's.
	latest := &st
	if full {
		// NodePort virtual servers on a link-local address are the
		// proxy's even when none is planned there: kube-proxy's, left at a
		// takeover, are removed (docs/migration.md).
		addrs := slices.Concat(o.LocalAddrs, l.env.LinkLocalAddrs)
		if r := l.read; r != nil && r.rb != nil {
			turn := func() *planner.State {
				t := l.turn()
				if t != nil {
					latest = t
				}
				return t
			}
			if res, err = l.Applier.(Readbacker).FullFrom(&st, addrs, r.rb, turn); res != nil {
				rep.Turns = res.Turns
			}
		} else {
			res, err = l.Applier.Full(&st, addrs)
		}
		// A read still under way is older than this sync's: dropped.
		l.reading, l.read = nil, nil
	} else {
		res, err = l.Applier.Partial(&st, l.plan, changed...)
	}
	sw.lap(&stages.Apply)
	if err != nil {
		return latest, nil, err
	}
	return latest, res, nil
}
