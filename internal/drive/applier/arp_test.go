package applier

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"net/netip"
	"strings"
	"testing"
)

// arpRules is fakeRules with the table of --strict-arp-vips: each SyncARP
// call, and what kube-ipvs0 held at that moment.
type arpRules struct {
	fakeRules
	calls    []string
	cleanups int
	bound    func() string
}

func (f *arpRules) SyncARP(addrs []netip.Prefix, full bool) (layer.Drift, error) {
	f.calls = append(f.calls, strings.TrimSpace(f.bound())+" | "+prefixList(addrs)+map[bool]string{true: " full", false: " partial"}[full])
	return nil, nil
}

func (f *arpRules) CleanupARP() error { f.cleanups++; return nil }

func prefixList(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// TestSyncARPOrder: the ARP table takes the plan's addresses in the rules
// step, after the unbinds and before the binds (kube-ipvs0 as the table
// sees it before "|"): a new VIP is in the set before it is bound, a gone
// one unbound before it leaves the set; a partial sync whose plan kept its
// addresses slice does not call it; cleanup removes the table.
func TestSyncARPOrder(t *testing.T) {
	b := newBed(t, setGuard{})
	r := &arpRules{bound: b.link.String}
	b.rules = &r.fakeRules
	b.a.rules = r
	if _, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), []netip.Addr{nodeIP}); err != nil {
		t.Fatal(err)
	}
	st := state("ns/a=10.96.0.1")
	for range 2 {
		if _, err := b.a.Partial(st, svcNames("ns/b")...); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		" | 10.96.0.1/32,10.96.0.2/32 full",
		"10.96.0.1/32 | 10.96.0.1/32 partial",
	}
	if strings.Join(r.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("SyncARP calls (kube-ipvs0 | addresses):\n%s\nwant\n%s", strings.Join(r.calls, "\n"), strings.Join(want, "\n"))
	}
	if _, err := b.a.Cleanup(state(), []netip.Addr{nodeIP}); err != nil || r.cleanups != 1 {
		t.Errorf("cleanup: %v, %d CleanupARP calls", err, r.cleanups)
	}
}
