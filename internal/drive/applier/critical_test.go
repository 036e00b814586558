package applier

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// TestCriticalThenFull: the critical Services' plan is served alone, in
// the safe order (the bed's checks: no bind before its virtual servers and
// the ipsets), and the first full sync that follows adds the rest without
// redoing or removing any of it.
func TestCriticalThenFull(t *testing.T) {
	b := newBed(t, setGuard{})
	res, already, err := b.a.Critical(state("default/kubernetes=10.96.0.1"))
	if err != nil || already || res.Err() != nil {
		t.Fatal(err, already, res.Err())
	}
	if got := b.link.String(); got != "10.96.0.1/32\n" {
		t.Fatalf("addresses after the critical Services %q", got)
	}
	if res.IPVS.ServicesAdded != 2 || res.IPVS.RealServersAdded != 2 || res.Bind.Bound != 1 {
		t.Fatalf("critical Services: %+v %+v", res.IPVS, res.Bind)
	}
	res, err = b.a.Full(state("default/kubernetes=10.96.0.1", "ns/a=10.96.0.2"), []netip.Addr{nodeIP})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if r := res.IPVS; r.ServicesAdded != 2 || r.RealServersAdded != 2 || r.Changes() != 4 {
		t.Errorf("the full sync after the critical Services changed IPVS %+v, want ns/a's 2 virtual and 2 real servers alone", r)
	}
	if res.Bind.Bound != 1 || res.Unbind.Unbound != 0 {
		t.Errorf("the full sync bound %d, unbound %d; want ns/a's 1, 0", res.Bind.Bound, res.Unbind.Unbound)
	}
	if got := b.link.String(); got != "10.96.0.1/32\n10.96.0.2/32\n" {
		t.Errorf("addresses after the full sync %q", got)
	}
}

// TestCriticalAfterRestart: a restarted proxy finds the critical Services'
// addresses bound and changes nothing; with one of them unbound it serves
// that one and removes nothing of the others the kernel holds.
func TestCriticalAfterRestart(t *testing.T) {
	b := newBed(t, setGuard{})
	if res, err := b.a.Full(state("default/kubernetes=10.96.0.1", "ns/a=10.96.0.2"), []netip.Addr{nodeIP}); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	table := b.table.String()
	restarted := New(ipvs.NewReconciler(b.table, ipvs.Options{}), addrmgr.NewManager(b.link, setGuard{}, nil), b.rules, nil)
	res, already, err := restarted.Critical(state("default/kubernetes=10.96.0.1"))
	if err != nil || !already || res.IPVS.Changes() != 0 || res.Bind.Bound != 0 {
		t.Fatalf("restart with the critical Services bound: already %v, err %v, %+v %+v", already, err, res.IPVS, res.Bind)
	}
	if b.table.String() != table {
		t.Fatalf("IPVS changed:\n%s\nwas:\n%s", b.table, table)
	}
	restarted = New(ipvs.NewReconciler(b.table, ipvs.Options{}), addrmgr.NewManager(b.link, setGuard{}, nil), b.rules, nil)
	res, already, err = restarted.Critical(state("default/kubernetes=10.96.0.1", "kube-system/kube-dns=10.96.0.10"))
	if err != nil || already || res.Err() != nil {
		t.Fatal(err, already, res.Err())
	}
	if got := b.link.String(); got != "10.96.0.1/32\n10.96.0.2/32\n10.96.0.10/32\n" {
		t.Errorf("addresses %q: ns/a's must stay, kube-dns's be added", got)
	}
	if tab := b.table.String(); !strings.Contains(tab, "10.96.0.2:80") || !strings.Contains(tab, "10.96.0.10:80") {
		t.Errorf("IPVS after the critical Services:\n%s", b.table)
	}
}
