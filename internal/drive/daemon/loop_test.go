package daemon

import (
	"context"
	"errors"
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/internal/health"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

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
	h.app.drift = layer.Drift{ipvs.DriftVirtualServer: 2, addrmgr.DriftAddress: 1, iptables.DriftIPSetEntry: 3, iptables.DriftIPTablesTable: 1}
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
