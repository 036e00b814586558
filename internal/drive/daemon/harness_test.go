package daemon

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The loop tests' harness: a fake Source, a fake Applier that records its
// calls and keeps a kernel state, and the harness that runs a Loop over
// them. The tests are in loop_test.go and its neighbours.

// fakeSource is a stateful Source: a set of services, each one port with
// a ClusterIP and endpoints, plus nodes.
type fakeSource struct {
	mu       sync.Mutex
	synced   chan struct{}
	svcs     map[types.NamespacedName]model.ServicePort
	eps      map[types.NamespacedName][]model.Endpoint
	nodes    []model.Node
	dirty    map[types.NamespacedName]bool
	triggers map[types.NamespacedName]time.Time
	nodesChg bool
	notify   chan struct{}
	// api are the default/kubernetes endpoints.
	api []netip.Addr
	// converted counts the Services converted (Service calls).
	converted int
	// onPending, if set, runs once at the next Pending call, before it
	// counts: a change that arrives at that moment.
	onPending func()
}

func newFakeSource() *fakeSource {
	return &fakeSource{synced: make(chan struct{}), svcs: map[types.NamespacedName]model.ServicePort{}, eps: map[types.NamespacedName][]model.Endpoint{},
		dirty: map[types.NamespacedName]bool{}, triggers: map[types.NamespacedName]time.Time{}, notify: make(chan struct{}, 1)}
}

func (s *fakeSource) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-s.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *fakeSource) Notify() <-chan struct{} { return s.notify }

func (s *fakeSource) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *fakeSource) TakeChanges() informers.Changes {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := informers.Changes{Services: sortedNames(maps.Keys(s.dirty)), Nodes: s.nodesChg, Triggers: s.triggers}
	s.dirty, s.triggers, s.nodesChg = map[types.NamespacedName]bool{}, map[types.NamespacedName]time.Time{}, false
	return c
}

func (s *fakeSource) Requeue(keys []types.NamespacedName) {
	s.mu.Lock()
	for _, k := range keys {
		s.dirty[k] = true
	}
	s.mu.Unlock()
	if len(keys) > 0 {
		s.signal()
	}
}

func (s *fakeSource) Pending() int {
	if f := s.onPending; f != nil {
		s.onPending = nil
		f()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.dirty)
}

func (s *fakeSource) Cluster() model.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}, Nodes: slices.Clone(s.nodes)}
	for _, k := range sortedNames(maps.Keys(s.svcs)) {
		sp := s.svcs[k]
		c.Services = append(c.Services, sp)
		c.Endpoints[sp.Name] = slices.Clone(s.eps[k])
	}
	return c
}

func (s *fakeSource) ServiceNames() []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedNames(maps.Keys(s.svcs))
}

// key reads "namespace/name" as the tests write Services.
func key(s string) types.NamespacedName {
	ns, name, _ := strings.Cut(s, "/")
	return types.NamespacedName{Namespace: ns, Name: name}
}

// sortedNames sorts Services as the informers do: by namespace, then name.
func sortedNames(seq iter.Seq[types.NamespacedName]) []types.NamespacedName {
	return slices.SortedFunc(seq, model.CompareServices)
}

func (s *fakeSource) Service(key types.NamespacedName) ([]model.ServicePort, map[model.ServicePortName][]model.Endpoint, []model.Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.converted++
	sp, ok := s.svcs[key]
	if !ok {
		return nil, nil, nil
	}
	return []model.ServicePort{sp}, map[model.ServicePortName][]model.Endpoint{sp.Name: slices.Clone(s.eps[key])}, nil
}

func (s *fakeSource) Nodes() ([]model.Node, []model.Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.nodes), nil
}

func (s *fakeSource) APIServerEndpoints() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.api)
}

func (s *fakeSource) ServiceIPs() convert.AddrSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.Addr
	for _, sp := range s.svcs {
		out = append(out, sp.ClusterIPs...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func (s *fakeSource) IsServiceIP(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.svcs {
		if slices.Contains(sp.ClusterIPs, a) {
			return true
		}
	}
	return false
}

// set creates or updates service name (in namespace "ns") with a ClusterIP
// and the given endpoint addresses, and marks it changed.
func (s *fakeSource) set(name, vip string, trigger time.Time, eps ...string) {
	s.mu.Lock()
	key := types.NamespacedName{Namespace: "ns", Name: name}
	s.svcs[key] = model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, Port: "http"},
		Protocol: model.TCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr(vip)}}
	var es []model.Endpoint
	for _, e := range eps {
		es = append(es, model.Endpoint{Address: netip.MustParseAddr(e), Port: 8080, Ready: true, Serving: true})
	}
	s.eps[key] = es
	s.dirty[key] = true
	if !trigger.IsZero() {
		s.triggers[key] = trigger
	}
	s.mu.Unlock()
	s.signal()
}

// external gives Service name the externalIP ext as well.
func (s *fakeSource) external(name, ext string) {
	s.mu.Lock()
	key := types.NamespacedName{Namespace: "ns", Name: name}
	sp := s.svcs[key]
	sp.ExternalIPs = append(slices.Clone(sp.ExternalIPs), netip.MustParseAddr(ext))
	s.svcs[key] = sp
	s.dirty[key] = true
	s.mu.Unlock()
	s.signal()
}

func (s *fakeSource) del(name string) {
	s.mu.Lock()
	key := types.NamespacedName{Namespace: "ns", Name: name}
	delete(s.svcs, key)
	delete(s.eps, key)
	s.dirty[key] = true
	s.mu.Unlock()
	s.signal()
}

func (s *fakeSource) setNodes(nodes ...model.Node) {
	s.mu.Lock()
	s.nodes = nodes
	s.nodesChg = true
	s.mu.Unlock()
	s.signal()
}

// call is one Full or Partial call the fake applier received.
type call struct {
	full    bool
	changed []types.NamespacedName
	// readback: a FullFrom, the IPVS table read beside the loop.
	readback bool
}

func (c call) String() string {
	if c.readback {
		return "full from readback"
	}
	if c.full {
		return "full"
	}
	names := make([]string, len(c.changed))
	for i, n := range c.changed {
		names[i] = n.String()
	}
	return "partial " + strings.Join(names, ",")
}

// fakeApplier is a stateful applier: a kernel table of virtual servers.
// Full replaces it with the plan (repairing drift); Partial touches only
// the changed services. It can fail per service or fail to read.
type fakeApplier struct {
	mu     sync.Mutex
	kernel map[ipvs.Key]ipvs.VirtualServer
	calls  []call
	// failService maps a Service to how many more syncs fail it.
	failService map[types.NamespacedName]int
	// readErrs is how many more syncs fail to read the kernel.
	readErrs int
	// block, if not nil, is waited on inside the next apply.
	block chan struct{}
	// entered is signalled when an apply starts.
	entered chan struct{}
	// drift is reported by the next sync.
	drift layer.Drift
	// failRules is how many more full syncs fail in the rules layer (a
	// failure that belongs to no service, as an ipset the kernel refuses
	// to replace).
	failRules int
	// conntrack are the flow deletions the next sync reports.
	conntrack [2]ipvs.ConntrackRound
}

func newFakeApplier() *fakeApplier {
	return &fakeApplier{kernel: map[ipvs.Key]ipvs.VirtualServer{}, failService: map[types.NamespacedName]int{}, entered: make(chan struct{}, 100)}
}

var errRead = errors.New("cannot dump IPVS")

func (f *fakeApplier) Full(st *planner.State, _ []netip.Addr) (*applier.Result, error) {
	return f.sync(st, true, nil)
}

func (f *fakeApplier) Partial(st *planner.State, _ applier.Index, changed ...types.NamespacedName) (*applier.Result, error) {
	return f.sync(st, false, changed)
}

func (f *fakeApplier) sync(st *planner.State, full bool, changed []types.NamespacedName) (*applier.Result, error) {
	f.entered <- struct{}{}
	f.mu.Lock()
	block := f.block
	f.block = nil
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{full: full, changed: slices.Clone(changed)})
	if f.readErrs > 0 {
		f.readErrs--
		return nil, errRead
	}
	match := func(svc model.ServicePortName) bool { return full || slices.Contains(changed, svc.NamespacedName) }
	res := &applier.Result{Drift: f.drift, IPVS: &ipvs.Result{Conntrack: f.conntrack}}
	f.drift, f.conntrack = nil, [2]ipvs.ConntrackRound{}
	if full && f.failRules > 0 {
		f.failRules--
		res.Failed = map[model.ServicePortName][]error{{}: {errors.New("ipset destroy KUBE-CLUSTER-IP: busy")}}
	}
	failing := map[types.NamespacedName]bool{}
	for k, n := range f.failService {
		if n > 0 {
			failing[k] = true
			f.failService[k] = n - 1
		}
	}
	for k, vs := range f.kernel {
		if match(vs.Service) && !failing[vs.Service.NamespacedName] {
			delete(f.kernel, k)
		}
	}
	for _, vs := range st.VirtualServers {
		if !match(vs.Service) {
			continue
		}
		if failing[vs.Service.NamespacedName] {
			if res.Failed == nil {
				res.Failed = map[model.ServicePortName][]error{}
			}
			res.Failed[vs.Service] = append(res.Failed[vs.Service], errors.New("EBUSY"))
			continue
		}
		f.kernel[vs.Key] = vs
	}
	return res, nil
}

// dump renders the kernel as "vip:port service rs,rs" lines, sorted.
func (f *fakeApplier) dump() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, vs := range f.kernel {
		var rs []string
		for _, r := range vs.RealServers {
			rs = append(rs, r.Address.String())
		}
		out = append(out, fmt.Sprintf("%s:%d %s %s", vs.Address, vs.Port, vs.Service, strings.Join(rs, ",")))
	}
	slices.Sort(out)
	return out
}

func (f *fakeApplier) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.calls))
	for i, c := range f.calls {
		out[i] = c.String()
	}
	return out
}

// planned is what the planner wants for the source's cluster now.
func planned(src *fakeSource, o planner.Options) []string {
	c := src.Cluster()
	// As the loop gathers the Nodes: through the trust order.
	c.Nodes, c.Refusals = planner.TrustedNodes(&o, c.Nodes, c.Refusals, src.ServiceIPs())
	st := planner.Plan(c, o)
	fa := newFakeApplier()
	fa.entered = make(chan struct{}, 1)
	if _, err := fa.Full(&st, nil); err != nil {
		panic(err)
	}
	return fa.dump()
}

type harness struct {
	t      *testing.T
	src    *fakeSource
	app    *fakeApplier
	clock  *clocktesting.FakeClock
	loop   *Loop
	cancel context.CancelFunc
	done   chan error
	// synced counts the syncs the loop finished, bookkeeping included.
	synced atomic.Int64
	// logs are the loop's log lines at info and above.
	logs *observer.ObservedLogs
	// reports are the finished syncs' reports, in order.
	repMu   sync.Mutex
	reports []SyncReport
}

// observe counts the loop's finished syncs for waitCalls.
func (h *harness) observe() {
	h.loop.Observe = func(rep SyncReport, _ Stats) {
		h.repMu.Lock()
		h.reports = append(h.reports, rep)
		h.repMu.Unlock()
		h.synced.Add(1)
	}
}

var testOpts = planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("192.168.0.1")}}

func newHarness(t *testing.T, minSync time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, src: newFakeSource(), app: newFakeApplier(),
		clock: clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)), done: make(chan error, 1)}
	h.loop = &Loop{Source: h.src, Applier: h.app, Options: testOpts,
		SyncPeriod: 30 * time.Second, MinSyncPeriod: minSync, BackoffInitial: time.Second, BackoffMax: 8 * time.Second,
		Metrics: metrics.New(), Clock: h.clock}
	core, logs := observer.New(zapcore.InfoLevel)
	h.loop.Log, h.logs = zap.New(core), logs
	h.observe()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.loop.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Error("loop did not stop")
		}
	})
	return h
}

// waitCalls waits until the applier has received n calls and the loop is
// idle again: every sync that called the applier has finished its
// bookkeeping (health, retry time, Events) and the loop waits on its timer.
// A timer waiter alone is not enough: the loop's timer stays armed while a
// sync runs, so a test stepping the clock then could move time between the
// apply and the failure's bookkeeping (it made TestRefusalEventsAndHealth
// record a failure 8 s late and see a healthy proxy under load).
func (h *harness) waitCalls(n int) []string {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		calls := h.app.callList()
		if len(calls) >= n && h.synced.Load() >= int64(len(calls)) && h.clock.HasWaiters() && len(h.src.notify) == 0 {
			if len(calls) > n {
				h.t.Fatalf("got %d calls, want %d: %v", len(calls), n, calls)
			}
			return calls
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %d calls; have %v", n, calls)
		}
		time.Sleep(time.Millisecond)
	}
}

// settle gives the loop a moment and checks it made no further call.
func (h *harness) settle(n int) {
	h.t.Helper()
	time.Sleep(20 * time.Millisecond)
	h.waitCalls(n)
}

func (h *harness) wantKernel() {
	h.t.Helper()
	if got, want := h.app.dump(), planned(h.src, testOpts); !slices.Equal(got, want) {
		h.t.Fatalf("kernel:\n%s\nwant (plan):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
