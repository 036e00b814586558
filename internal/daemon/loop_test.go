package daemon

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/internal/health"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

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

func (s *fakeSource) ServiceIPs() informers.AddrSet {
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
	drift applier.Drift
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
	f.drift, f.conntrack = applier.Drift{}, [2]ipvs.ConntrackRound{}
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

func TestNothingAppliedBeforeCacheSync(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	time.Sleep(30 * time.Millisecond)
	if calls := h.app.callList(); len(calls) != 0 {
		t.Fatalf("applied before the caches synced: %v", calls)
	}
	close(h.src.synced)
	if calls := h.waitCalls(1); calls[0] != "full" {
		t.Fatalf("first sync %v, want full", calls)
	}
	h.wantKernel()
}

// TestStartupLines: one info line says what the loop waits for before the
// caches sync, and one when the first full sync has applied, with what it
// programmed; later full syncs do not repeat it.
func TestStartupLines(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	h.clock.Step(30 * time.Second)
	h.waitCalls(2)
	if n := h.logs.FilterMessageSnippet("waiting for the informer caches").Len(); n != 1 {
		t.Errorf("%d lines say what the loop waits for, want 1", n)
	}
	first := h.logs.FilterMessage("first full sync applied").All()
	if len(first) != 1 || first[0].ContextMap()["virtualServers"] != int64(1) {
		t.Errorf("first full sync lines: %+v", first)
	}
}

func TestStopBeforeCacheSync(t *testing.T) {
	src := newFakeSource()
	l := &Loop{Source: src, Applier: newFakeApplier(), SyncPeriod: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Run(ctx); !errors.Is(err, ErrCacheSync) {
		t.Fatalf("Run = %v, want ErrCacheSync", err)
	}
}

func TestPartialSyncTouchesOnlyChangedServices(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2")
	close(h.src.synced)
	h.waitCalls(1)
	h.wantKernel()

	// Drift in b's virtual server: a partial sync of a does not touch it.
	h.app.mu.Lock()
	delete(h.app.kernel, ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.2"), Port: 80})
	h.app.mu.Unlock()
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1", "10.244.0.3")
	if calls := h.waitCalls(2); calls[1] != "partial ns/a" {
		t.Fatalf("calls %v", calls)
	}
	if got := h.app.dump(); len(got) != 1 || !strings.Contains(got[0], "10.244.0.1,10.244.0.3") {
		t.Fatalf("after partial: %v", got)
	}
	// The full resync every SyncPeriod repairs it.
	h.clock.Step(29 * time.Second)
	h.settle(2)
	h.clock.Step(time.Second)
	if calls := h.waitCalls(3); calls[2] != "full" {
		t.Fatalf("calls %v", calls)
	}
	h.wantKernel()

	// Deletion is a partial sync too.
	h.src.del("b")
	if calls := h.waitCalls(4); calls[3] != "partial ns/b" {
		t.Fatalf("calls %v", calls)
	}
	h.wantKernel()
	if st := h.loop.Stats(); st.Full != 2 || st.Partial != 2 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestChangesDuringApplyAreBatched(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	<-h.app.entered

	block := make(chan struct{})
	h.app.mu.Lock()
	h.app.block = block
	h.app.mu.Unlock()
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.2")
	<-h.app.entered // the partial of a is being applied
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2")
	h.src.set("c", "10.96.0.3", time.Time{}, "10.244.0.3")
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.4")
	close(block)
	calls := h.waitCalls(3)
	if want := []string{"full", "partial ns/a", "partial ns/a,ns/b,ns/c"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	h.wantKernel()
}

func TestMinSyncPeriodCoalesces(t *testing.T) {
	h := newHarness(t, 2*time.Second)
	close(h.src.synced)
	h.waitCalls(1)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	h.settle(1)
	h.clock.Step(time.Second)
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2")
	h.settle(1)
	h.clock.Step(time.Second)
	if calls := h.waitCalls(2); calls[1] != "partial ns/a,ns/b" {
		t.Fatalf("calls %v", calls)
	}
	h.wantKernel()
	// A change long after the last sync is applied at once.
	h.clock.Step(5 * time.Second)
	h.src.set("c", "10.96.0.3", time.Time{}, "10.244.0.3")
	if calls := h.waitCalls(3); calls[2] != "partial ns/c" {
		t.Fatalf("calls %v", calls)
	}
}

func TestFailedApplyRetriedWithBackoff(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)

	h.app.mu.Lock()
	h.app.failService[key("ns/b")] = 3
	h.app.mu.Unlock()
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2")
	h.waitCalls(2)
	// Retries after 1s, 2s, 4s; the third retry succeeds.
	for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		h.clock.Step(d - 10*time.Millisecond)
		h.settle(2 + i)
		h.clock.Step(10 * time.Millisecond)
		if calls := h.waitCalls(3 + i); calls[2+i] != "partial ns/b" {
			t.Fatalf("retry %d: calls %v", i, calls)
		}
	}
	h.wantKernel()
	if v := metricValue(t, h.loop.Metrics, "ipvs_proxy_apply_errors_total", "partial"); v != 3 {
		t.Errorf("apply errors %v, want 3", v)
	}
	// Success resets the backoff: the next failure waits 1s again.
	h.app.mu.Lock()
	h.app.failService[key("ns/a")] = 1
	h.app.mu.Unlock()
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.9")
	h.waitCalls(6)
	h.clock.Step(time.Second)
	if calls := h.waitCalls(7); calls[6] != "partial ns/a" {
		t.Fatalf("calls %v", calls)
	}
	h.wantKernel()
}

func TestUnreadableKernelRetriedAsFull(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	h.app.mu.Lock()
	h.app.readErrs = 2
	h.app.mu.Unlock()
	close(h.src.synced)
	h.waitCalls(1)
	h.clock.Step(time.Second)
	h.waitCalls(2)
	h.clock.Step(2 * time.Second)
	calls := h.waitCalls(3)
	if want := []string{"full", "full", "full"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	h.wantKernel()
}

// TestOwnNodeChangeIsFullSync: this node's own Node (its zone here)
// changes what every service port plans: a full sync plans them all.
func TestOwnNodeChangeIsFullSync(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	h.src.setNodes(model.Node{Name: "n1", Addresses: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
		Labels: map[string]string{planner.ZoneLabel: "z2"}})
	if calls := h.waitCalls(2); calls[1] != "full" {
		t.Fatalf("calls %v", calls)
	}
	if rep := h.report(2); !rep.Replanned {
		t.Fatalf("sync: %+v, want every service planned again", rep)
	}
}

// TestKickSyncsWithoutChanges: a kick (kube-ipvs0 changed by others) runs
// a partial sync although no service changed, and only one per kick.
func TestKickSyncsWithoutChanges(t *testing.T) {
	h := newHarness(t, 0)
	kick := make(chan struct{}, 1)
	h.loop.Kick = kick
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	h.settle(1)
	kick <- struct{}{}
	if calls := h.waitCalls(2); calls[1] != "partial " {
		t.Fatalf("calls %v, want a partial sync of no service", calls)
	}
	h.settle(2)
	h.wantKernel()
}

// fakeNode is a Loop.Env: a node with the addresses local, counting the
// full reads (a full sync's, or the read beside the loop).
type fakeNode struct {
	mu        sync.Mutex
	local     []netip.Addr
	fullReads atomic.Int32
}

func (n *fakeNode) env(full bool) (nodeenv.Env, error) {
	if full {
		n.fullReads.Add(1)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return nodeenv.Env{LocalAddrs: slices.Clone(n.local)}, nil
}

// add gives the node another address.
func (n *fakeNode) add(a netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.local = append(n.local, a)
}

// What a sync repaired behind the proxy's back is counted by kind.
// TestNodeAddressChangeIsFullSync: a partial sync that finds the node's
// own addresses changed plans and applies everything (NodePorts follow the
// addresses), and the partial syncs after it plan only what changed.
func TestNodeAddressChangeIsFullSync(t *testing.T) {
	h := newHarness(t, 0)
	node := &fakeNode{local: []netip.Addr{netip.MustParseAddr("192.168.0.1")}}
	h.loop.Env = node.env
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.2")
	if calls := h.waitCalls(2); calls[1] != "partial ns/a" {
		t.Fatalf("calls %v", calls)
	}
	node.add(netip.MustParseAddr("192.168.0.2"))
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.3")
	if calls := h.waitCalls(3); calls[2] != "full" {
		t.Fatalf("a sync after the node's addresses changed: calls %v, want full", calls)
	}
	if rep := h.report(3); !rep.Replanned {
		t.Fatalf("a sync after the node's addresses changed: %+v, want every service planned again", rep)
	}
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.4")
	if calls := h.waitCalls(4); calls[3] != "partial ns/a" {
		t.Fatalf("calls %v", calls)
	}
	if st := h.loop.Stats(); st.Full != 2 || st.Partial != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestDriftRepairsCounted(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	h.app.mu.Lock()
	h.app.drift = applier.Drift{VirtualServers: 2, Addresses: 1, Drift: iptables.Drift{SetEntries: 3, Tables: 1}}
	h.app.mu.Unlock()
	close(h.src.synced)
	h.waitCalls(1)
	want := map[string]float64{"virtual_server": 2, "address": 1, "ipset_entry": 3, "ipset": 0, "iptables_table": 1}
	for kind, n := range want {
		if got := testutil.ToFloat64(h.loop.Metrics.DriftRepairs.WithLabelValues(kind)); got != n {
			t.Errorf("drift_repairs_total{kind=%q} = %v, want %v", kind, got, n)
		}
	}
}

func TestNetworkProgrammingLatency(t *testing.T) {
	h := newHarness(t, 0)
	// A change from before the start (the initial list) is not measured.
	h.src.set("old", "10.96.0.9", h.clock.Now().Add(-time.Hour), "10.244.0.9")
	close(h.src.synced)
	h.waitCalls(1)
	h.clock.Step(10 * time.Second)
	trig := h.clock.Now().Add(-1500 * time.Millisecond)
	h.src.set("a", "10.96.0.1", trig, "10.244.0.1")
	h.waitCalls(2)
	// One observation of 1.5s.
	m := findMetric(t, h.loop.Metrics, "ipvs_proxy_network_programming_duration_seconds", "")
	if c, s := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); c != 1 || s != 1.5 {
		t.Errorf("latency count %d sum %v, want 1 and 1.5", c, s)
	}
	if v := metricValue(t, h.loop.Metrics, "ipvs_proxy_virtual_servers", ""); v != 2 {
		t.Errorf("virtual servers %v", v)
	}
}

// findMetric returns the metric name (with label mode=mode, if mode is
// not empty) from the registry.
func findMetric(t *testing.T, m *metrics.Metrics, name, mode string) *dto.Metric {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if mode == "" {
				return mt
			}
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "mode" && lp.GetValue() == mode {
					return mt
				}
			}
		}
	}
	t.Fatalf("no metric %s{mode=%q}", name, mode)
	return nil
}

func metricValue(t *testing.T, m *metrics.Metrics, name, mode string) float64 {
	t.Helper()
	mt := findMetric(t, m, name, mode)
	if c := mt.GetCounter(); c != nil {
		return c.GetValue()
	}
	return mt.GetGauge().GetValue()
}

// TestRefusalEventsAndHealth: a node's address as an externalIP is a
// refusal reported once as an Event on the Service; /livez turns unhealthy
// when failing syncs leave a change pending longer than the timeout, and
// healthy again after a successful sync.
func TestRefusalEventsAndHealth(t *testing.T) {
	src, app := newFakeSource(), newFakeApplier()
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	type event struct{ kind, name, reason, note string }
	var mu sync.Mutex
	var evs []event
	sink := func(ref *corev1.ObjectReference, reason, note string) {
		mu.Lock()
		evs = append(evs, event{ref.Kind, ref.Namespace + "/" + ref.Name, reason, note})
		mu.Unlock()
	}
	hp := health.NewProxy(60*time.Second, clock.Now)
	h := &harness{t: t, src: src, app: app, clock: clock, done: make(chan error, 1)}
	h.loop = &Loop{Source: src, Applier: app, Options: testOpts, SyncPeriod: 30 * time.Second,
		BackoffInitial: time.Second, BackoffMax: 8 * time.Second,
		Events: events.New(sink, nil, events.DefaultOptions), Health: hp, Clock: clock}
	h.observe()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-h.done }()
	go func() { h.done <- h.loop.Run(ctx) }()

	src.setNodes(model.Node{Name: "n2", Addresses: []netip.Addr{netip.MustParseAddr("192.168.0.2")}})
	src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	src.mu.Lock()
	sp := src.svcs[key("ns/a")]
	sp.ExternalIPs = []netip.Addr{netip.MustParseAddr("192.168.0.2")}
	src.svcs[key("ns/a")] = sp
	src.mu.Unlock()
	close(src.synced)
	h.waitCalls(1)
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2") // another sync: no new Event
	h.waitCalls(2)
	mu.Lock()
	got := slices.Clone(evs)
	mu.Unlock()
	if len(got) != 1 || got[0].kind != "Service" || got[0].name != "ns/a" || got[0].reason != "NodeIP" || !strings.Contains(got[0].note, "192.168.0.2") {
		t.Fatalf("events %+v, want one NodeIP Event on ns/a", got)
	}
	if !hp.Healthy() {
		t.Fatal("unhealthy after successful syncs")
	}

	// b fails for good: pending past the timeout is unhealthy.
	app.mu.Lock()
	app.failService[key("ns/b")] = 1000
	app.mu.Unlock()
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.3")
	h.waitCalls(3)
	for i := 0; i < 8; i++ { // backoff 1, 2, 4, 8, 8, ... s: past 60 s
		clock.Step(8 * time.Second)
		h.waitCalls(4 + i)
	}
	if hp.Healthy() {
		t.Fatal("healthy while a change failed for over 60s")
	}
	app.mu.Lock()
	app.failService[key("ns/b")] = 0
	app.mu.Unlock()
	clock.Step(8 * time.Second)
	h.waitCalls(12)
	if !hp.Healthy() {
		t.Fatal("unhealthy after a successful sync")
	}
}

// TestFailingFullSyncsMakeHealthzUnready: a full sync that fails in the
// rules layer (no service to blame) is retried as a full sync, and while
// every full sync fails /healthz and /livez turn 503 once the failure is
// older than the timeout, even though changes of single services meanwhile
// apply; the first successful full sync makes them 200 again. Before the
// first full sync has applied, /healthz is 503 whatever the timeout.
func TestFailingFullSyncsMakeHealthzUnready(t *testing.T) {
	h := newHarness(t, 0)
	hp := health.NewProxy(60*time.Second, h.clock.Now)
	hp.SyncNode(&corev1.Node{})
	h.loop.Health = hp
	h.app.mu.Lock()
	h.app.failRules = 1
	h.app.mu.Unlock()
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	if code := healthzCode(t, hp, "/healthz"); code != 503 {
		t.Fatalf("/healthz %d after a failed first full sync, want 503", code)
	}
	h.clock.Step(time.Second)
	h.waitCalls(2)
	if code := healthzCode(t, hp, "/healthz"); code != 200 {
		t.Fatalf("/healthz %d after the first successful full sync, want 200", code)
	}

	h.app.mu.Lock()
	h.app.failRules = 1000
	h.app.mu.Unlock()
	h.clock.Step(30 * time.Second) // the periodic full sync fails
	calls := h.waitCalls(3)
	for d := time.Duration(0); d < 70*time.Second; d += 8 * time.Second {
		h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0."+strconv.Itoa(2+len(calls)))
		h.clock.Step(8 * time.Second)
		calls = h.waitCalls(len(calls) + 1)
	}
	for i, c := range calls[2:] {
		if c != "full" {
			t.Fatalf("call %d is %q while the rules layer fails: every retry must be a full sync; calls %v", 3+i, c, calls)
		}
	}
	for _, path := range []string{"/healthz", "/livez"} {
		if code := healthzCode(t, hp, path); code != 503 {
			t.Errorf("%s %d while every full sync failed for over 60s, want 503", path, code)
		}
	}
	h.app.mu.Lock()
	h.app.failRules = 0
	h.app.mu.Unlock()
	h.clock.Step(8 * time.Second)
	h.waitCalls(len(calls) + 1)
	if code := healthzCode(t, hp, "/healthz"); code != 200 {
		t.Fatalf("/healthz %d after a successful full sync, want 200", code)
	}
}

func healthzCode(t *testing.T, hp *health.Proxy, path string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	hp.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code
}

// TestNoLocalEndpointsMetric: kube-proxy's
// sync_proxy_rules_no_local_endpoints_total follows the plan at every
// sync, full or partial: a Service whose internal Local policy finds its
// only endpoint on another node counts as internal until it is deleted.
func TestNoLocalEndpointsMetric(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.1.5") // on no node: elsewhere
	close(h.src.synced)
	h.waitCalls(1)
	noLocal := func(policy string) float64 {
		return testutil.ToFloat64(h.loop.Metrics.KubeProxy.NoLocalEndpoints.WithLabelValues(policy, "IPv4"))
	}
	if i, e := noLocal("internal"), noLocal("external"); i != 0 || e != 0 {
		t.Errorf("Cluster policy: internal %v external %v, want 0 0", i, e)
	}
	k := types.NamespacedName{Namespace: "ns", Name: "a"}
	h.src.mu.Lock()
	sp := h.src.svcs[k]
	sp.InternalPolicyLocal = true
	h.src.svcs[k] = sp
	h.src.dirty[k] = true
	h.src.mu.Unlock()
	h.src.signal()
	h.waitCalls(2)
	if i, e := noLocal("internal"), noLocal("external"); i != 1 || e != 0 {
		t.Errorf("internalTrafficPolicy Local, endpoint elsewhere: internal %v external %v, want 1 0", i, e)
	}
	h.src.del("a")
	h.waitCalls(3)
	if i := noLocal("internal"); i != 0 {
		t.Errorf("after the Service's deletion: internal %v, want 0", i)
	}
}

// TestConntrackReconcilerMetrics: each sync that deleted conntrack flows
// is one round of kube-proxy's conntrack reconciler in its family: the
// duration observed and the flows added; a sync that deleted none adds no
// round.
func TestConntrackReconcilerMetrics(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.1.5")
	close(h.src.synced)
	h.waitCalls(1)
	h.app.mu.Lock()
	h.app.conntrack = [2]ipvs.ConntrackRound{{Ran: true, Entries: 3, Took: 20 * time.Millisecond}, {Ran: true}}
	h.app.mu.Unlock()
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.1.6")
	h.waitCalls(2)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.1.7")
	h.waitCalls(3)
	kp := h.loop.Metrics.KubeProxy
	for fam, want := range map[string]float64{"IPv4": 3, "IPv6": 0} {
		if got := testutil.ToFloat64(kp.ConntrackDeleted.WithLabelValues(fam)); got != want {
			t.Errorf("kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=%q} = %v, want %v", fam, got, want)
		}
	}
	m := &dto.Metric{}
	if err := kp.ConntrackSync.WithLabelValues("IPv4").(prometheus.Histogram).Write(m); err != nil {
		t.Fatal(err)
	}
	if c, s := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); c != 1 || s != 0.02 {
		t.Errorf("IPv4 rounds %d taking %v s, want 1 of 0.02 s", c, s)
	}
}
