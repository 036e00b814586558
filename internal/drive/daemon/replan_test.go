package daemon

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// report is the n-th finished sync's report (from 1).
func (h *harness) report(n int) SyncReport {
	h.t.Helper()
	h.repMu.Lock()
	defer h.repMu.Unlock()
	if len(h.reports) < n {
		h.t.Fatalf("%d syncs reported, want %d", len(h.reports), n)
	}
	return h.reports[n-1]
}

// converted is how many Services the loop has converted so far.
func (h *harness) converted() int {
	h.src.mu.Lock()
	defer h.src.mu.Unlock()
	return h.src.converted
}

// TestPeriodicFullSyncKeepsThePlan: the full sync of every SyncPeriod, with
// nothing but services changed since the last plan, converts and plans
// no service that did not change, and still applies (and so repairs) the
// whole state.
func TestPeriodicFullSyncKeepsThePlan(t *testing.T) {
	h := newHarness(t, 0)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2")
	close(h.src.synced)
	h.waitCalls(1)
	if rep := h.report(1); !rep.Full || !rep.Replanned {
		t.Fatalf("first sync: %+v, want a full sync that planned everything", rep)
	}
	before := h.converted()

	// Drift in b: the periodic full sync repairs it from the kept plan.
	h.app.mu.Lock()
	delete(h.app.kernel, ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.2"), Port: 80})
	h.app.mu.Unlock()
	h.clock.Step(30 * time.Second)
	if calls := h.waitCalls(2); calls[1] != "full" {
		t.Fatalf("calls %v", calls)
	}
	if rep := h.report(2); !rep.Full || rep.Replanned {
		t.Fatalf("periodic sync: %+v, want a full sync that kept the plan", rep)
	}
	if n := h.converted() - before; n != 0 {
		t.Errorf("the periodic full sync converted %d Services, want 0", n)
	}
	h.wantKernel()

	// A change, then more drift: the next full syncs plan the change
	// alone and apply everything.
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.3")
	h.waitCalls(3)
	h.app.mu.Lock()
	delete(h.app.kernel, ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.1"), Port: 80})
	h.app.mu.Unlock()
	before = h.converted()
	h.clock.Step(30 * time.Second)
	if calls := h.waitCalls(4); calls[3] != "full" {
		t.Fatalf("calls %v", calls)
	}
	if rep := h.report(4); rep.Replanned {
		t.Fatalf("periodic sync: %+v, want the plan kept", rep)
	}
	if n := h.converted() - before; n != 0 {
		t.Errorf("the periodic full sync converted %d Services, want 0", n)
	}
	h.wantKernel()
}

// TestNodesChangePlansTheirServicesOnly: a change of the other Nodes or of
// the API server's addresses, by an event or found by the periodic full
// sync, plans again only the services that name an address whose
// protection changed (planner.Incremental.Reguard), and the kernel
// follows: b's cluster IP, now a Node's address, is no longer served.
func TestNodesChangePlansTheirServicesOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *harness)
		// sync is the call that takes the change; named the services
		// it plans again.
		sync  string
		named []string
	}{
		{"a Node took b's address", func(h *harness) {
			h.src.setNodes(h.src.nodes[0], model.Node{Name: "n2", Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.2")}})
		}, "partial ns/b", []string{"ns/b"}},
		{"n3 is forgotten as n2 takes b's address", func(h *harness) {
			h.src.setNodes(model.Node{Name: "n2", Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.2")}})
		}, "partial ns/a,ns/b", []string{"ns/a", "ns/b"}},
		{"a Node joined with no service's address", func(h *harness) {
			h.src.setNodes(h.src.nodes[0], model.Node{Name: "n4", Addresses: []netip.Addr{netip.MustParseAddr("192.168.0.4")}})
		}, "partial ", nil},
		// A deleted Node's grace period ends with no event: the Source's
		// Nodes differ at the next periodic sync.
		{"a deleted Node's grace ended", func(h *harness) {
			h.src.mu.Lock()
			h.src.nodes = nil
			h.src.mu.Unlock()
			h.clock.Step(30 * time.Second)
		}, "full", []string{"ns/a"}},
		// The API server's endpoints that are no Service IP are
		// protected (guard.APIServer): no service names this one.
		{"the API server moved", func(h *harness) {
			h.src.mu.Lock()
			h.src.api = []netip.Addr{netip.MustParseAddr("192.168.0.9")}
			h.src.mu.Unlock()
			h.clock.Step(30 * time.Second)
		}, "full", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 0)
			h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
			h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2")
			// The Nodes claim the externalIPs: a ClusterIP no Node can
			// claim (the trust order).
			h.src.external("a", "192.0.2.1")
			h.src.external("b", "192.0.2.2")
			h.src.mu.Lock()
			// n3, deleted, is remembered with a's address: a is refused.
			h.src.nodes = []model.Node{{Name: "n3", Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.1")},
				LastSeen: h.clock.Now().Add(-time.Hour)}}
			h.src.mu.Unlock()
			close(h.src.synced)
			h.waitCalls(1)
			before := h.converted()
			tc.change(h)
			if calls := h.waitCalls(2); calls[1] != tc.sync {
				t.Fatalf("calls %v, want %q", calls, tc.sync)
			}
			rep := h.report(2)
			if rep.Replanned || !rep.Reguarded {
				t.Fatalf("sync: %+v, want the plan moved to the new guard, not every service planned again", rep)
			}
			var named []string
			for _, k := range rep.Services {
				named = append(named, k.String())
			}
			if !slices.Equal(named, tc.named) {
				t.Errorf("planned again %v, want %v", named, tc.named)
			}
			if n := h.converted() - before; n != len(tc.named) {
				t.Errorf("converted %d Services, want %d", n, len(tc.named))
			}
			h.wantKernel()
		})
	}
}

func TestSameNode(t *testing.T) {
	n := model.Node{Name: "n1", Addresses: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
		PrimaryIPs: []netip.Addr{netip.MustParseAddr("192.168.0.1")}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
		Labels: map[string]string{"topology.kubernetes.io/zone": "a"}}
	for _, tc := range []struct {
		name   string
		change func(m *model.Node)
	}{
		{"name", func(m *model.Node) { m.Name = "n2" }},
		{"addresses", func(m *model.Node) { m.Addresses = append(m.Addresses, netip.MustParseAddr("192.168.0.2")) }},
		{"primary IPs", func(m *model.Node) { m.PrimaryIPs = nil }},
		{"pod CIDRs", func(m *model.Node) { m.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")} }},
		{"labels", func(m *model.Node) { m.Labels = map[string]string{"topology.kubernetes.io/zone": "b"} }},
		{"last seen", func(m *model.Node) { m.LastSeen = time.Unix(1, 0) }},
	} {
		m := n
		m.Addresses, m.PrimaryIPs, m.PodCIDRs = slices.Clone(n.Addresses), slices.Clone(n.PrimaryIPs), slices.Clone(n.PodCIDRs)
		if !sameNode(n, m) {
			t.Fatalf("a copy differs")
		}
		tc.change(&m)
		if sameNode(n, m) {
			t.Errorf("%s changed: sameNode still true", tc.name)
		}
	}
}
