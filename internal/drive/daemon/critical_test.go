package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
)

// criticalApplier is the fake applier with Critical: it records the
// critical Services' plan it was given and applies it as a partial sync of
// those Services (the fake's Partial records nothing more than the fake's
// calls do: order lists both).
type criticalApplier struct {
	*fakeApplier
	mu sync.Mutex
	// order is each call: "critical SERVICES" or "full".
	order []string
}

func (c *criticalApplier) Critical(st *planner.State) (*applier.Result, bool, error) {
	var names []types.NamespacedName
	for _, vs := range st.VirtualServers {
		if !slices.Contains(names, vs.Service.NamespacedName) {
			names = append(names, vs.Service.NamespacedName)
		}
	}
	c.mu.Lock()
	c.order = append(c.order, fmt.Sprintf("critical %v", names))
	c.mu.Unlock()
	// The fake's Partial, less its record of the call.
	res, err := c.fakeApplier.sync(st, false, names)
	c.fakeApplier.mu.Lock()
	c.fakeApplier.calls = c.fakeApplier.calls[:len(c.fakeApplier.calls)-1]
	c.fakeApplier.mu.Unlock()
	<-c.fakeApplier.entered
	return res, false, err
}

func (c *criticalApplier) Full(st *planner.State, addrs []netip.Addr) (*applier.Result, error) {
	c.mu.Lock()
	c.order = append(c.order, "full")
	c.mu.Unlock()
	return c.fakeApplier.Full(st, addrs)
}

func (c *criticalApplier) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.order)
}

// ClusterDNS is the informers' lookup of the cluster DNS Services: here
// kube-system/kube-dns when cached.
func (s *fakeSource) ClusterDNS() []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := key("kube-system/kube-dns"); s.svcs[k].Name.Name != "" {
		return []types.NamespacedName{k}
	}
	return nil
}

// setIn is fakeSource.set for a Service in namespace ns.
func (s *fakeSource) setIn(ns, name, vip string, eps ...string) {
	s.mu.Lock()
	k := types.NamespacedName{Namespace: ns, Name: name}
	s.svcs[k] = model.ServicePort{Name: model.ServicePortName{NamespacedName: k, Port: "p"},
		Protocol: model.TCP, Port: 443, ClusterIPs: []netip.Addr{netip.MustParseAddr(vip)}}
	var es []model.Endpoint
	for _, e := range eps {
		es = append(es, model.Endpoint{Address: netip.MustParseAddr(e), Port: 6443, Ready: true, Serving: true})
	}
	s.eps[k] = es
	s.dirty[k] = true
	s.mu.Unlock()
	s.signal()
}

// criticalHarness is a harness whose applier serves the critical Services
// and whose Source finds the cluster DNS (kube-system/kube-dns), with
// Services on both sides of them in the plan's order.
func criticalHarness(t *testing.T, critical ...types.NamespacedName) (*harness, *criticalApplier) {
	h := newHarness(t, 0)
	ca := &criticalApplier{fakeApplier: h.app}
	// Read by the loop once the caches synced (closing synced), not before.
	h.loop.Applier = ca
	h.loop.Critical = critical
	h.src.set("a", "10.96.0.5", time.Time{}, "10.244.0.1")
	h.src.setIn("default", "kubernetes", "10.96.0.1", "192.168.0.10")
	h.src.setIn("kube-system", "kube-dns", "10.96.0.10", "10.244.0.2")
	h.src.setIn("kube-system", "metrics", "10.96.0.11", "10.244.0.3")
	h.src.setIn("zz", "last", "10.96.0.12", "10.244.0.4")
	return h, ca
}

// TestCriticalServicesFirst: after the caches synced, default/kubernetes
// and the cluster DNS are planned and applied alone before the first full
// sync, which then applies everything; the time since the caches synced
// is logged once; later full syncs and restarts of the loop's syncs do not
// serve them again.
func TestCriticalServicesFirst(t *testing.T) {
	h, ca := criticalHarness(t)
	close(h.src.synced)
	h.waitCalls(1)
	want := []string{"critical [default/kubernetes kube-system/kube-dns]", "full"}
	if got := ca.calls(); !slices.Equal(got, want) {
		t.Fatalf("syncs %q, want %q", got, want)
	}
	h.wantKernel()
	served := h.logs.FilterMessage("critical Services served").All()
	if len(served) != 1 {
		t.Fatalf("%d lines say the critical Services were served, want 1", len(served))
	}
	if _, ok := served[0].ContextMap()["sinceCachesSynced"]; !ok {
		t.Errorf("the line does not say the time since the caches synced: %v", served[0].ContextMap())
	}
	h.clock.Step(30 * time.Second)
	h.waitCalls(2)
	if got := ca.calls(); len(got) != 3 || got[2] != "full" {
		t.Errorf("after a periodic full sync: %q; the critical Services are served first once", got)
	}
}

// TestCriticalServicesNamed: --critical-services names the Services served
// after default/kubernetes in place of the cluster DNS; one not cached is
// left out.
func TestCriticalServicesNamed(t *testing.T) {
	h, ca := criticalHarness(t, key("kube-system/metrics"), key("nowhere/gone"))
	close(h.src.synced)
	h.waitCalls(1)
	want := []string{"critical [default/kubernetes kube-system/metrics]", "full"}
	if got := ca.calls(); !slices.Equal(got, want) {
		t.Fatalf("syncs %q, want %q", got, want)
	}
	h.wantKernel()
	if l := h.logs.FilterMessage("critical Services served").All(); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0].ContextMap()["services"]), "kube-system/metrics") {
		t.Errorf("log: %+v", l)
	}
}
