package planner

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// TestTakeHandedOver: a Service that wins a virtual server another held
// (the winner deleted, or its externalIP gone) is named once, after the
// State that picked it; a Service that wins what nobody held (its own new
// port, the first plan) is not.
func TestTakeHandedOver(t *testing.T) {
	inc := NewIncremental(opts(), testNodes, nil)
	update := func(sp model.ServicePort, ep string) {
		inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, map[model.ServicePortName][]model.Endpoint{sp.Name: {ready(ep, 8080, "n2")}}, nil)
		inc.State()
	}
	a, b, c := svc("a", "10.96.0.1"), svc("b", "10.96.0.2"), svc("c", "10.96.0.3")
	a.ExternalIPs = []netip.Addr{addr("203.0.113.7")}
	b.ExternalIPs, c.ExternalIPs = a.ExternalIPs, a.ExternalIPs
	update(a, "10.0.0.1")
	update(b, "10.0.0.2")
	update(c, "10.0.0.3")
	if got := inc.TakeHandedOver(); got != nil {
		t.Fatalf("after the first plans: %v handed over, want none (default/a wins the externalIP)", got)
	}
	a.ExternalIPs = nil
	update(a, "10.0.0.1")
	if got, want := inc.TakeHandedOver(), []types.NamespacedName{b.Name.NamespacedName}; !slices.Equal(got, want) {
		t.Errorf("default/a let the externalIP go: %v handed over, want %v", got, want)
	}
	if got := inc.TakeHandedOver(); got != nil {
		t.Errorf("taken twice: %v", got)
	}
	inc.Update(b.Name.NamespacedName, nil, nil, nil)
	inc.State()
	if got, want := inc.TakeHandedOver(), []types.NamespacedName{c.Name.NamespacedName}; !slices.Equal(got, want) {
		t.Errorf("default/b deleted: %v handed over, want %v", got, want)
	}
}
