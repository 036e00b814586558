package applier

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// TestFullFromReadBesideAPartial: the periodic full sync's IPVS and
// kube-ipvs0 read runs on another goroutine while a partial sync deletes a
// Service and creates another; FullFrom then neither recreates the deleted
// one nor counts the new one as drift, and repairs what was deleted by
// hand before the read, without dumping kube-ipvs0 again (the unwatched
// bed's partial sync dumped it, later than the read).
func TestFullFromReadBesideAPartial(t *testing.T) {
	b := newBed(t, setGuard{})
	nodeAddrs := []netip.Addr{nodeIP}
	if res, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), nodeAddrs); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	// Deleted by hand (the bed's order check is for the applier's own
	// deletions).
	vss, _ := service("ns/a", "10.96.0.1", 443)
	check := b.table.Fail
	b.table.Fail = nil
	if err := b.table.DelService(vss[0].Key); err != nil {
		t.Fatal(err)
	}
	b.table.Fail = check
	read := b.a.BeginFull()
	done := make(chan *Readback)
	go func() {
		rb, err := read()
		if err != nil {
			t.Error(err)
		}
		done <- rb
	}()
	rb := <-done
	after := state("ns/a=10.96.0.1", "ns/c=10.96.0.3")
	if res, err := b.a.Partial(after, svcNames("ns/b", "ns/c")...); err != nil || res.Err() != nil || res.IPVS.ServicesAdded != 2 || res.IPVS.ServicesDeleted != 2 {
		t.Fatalf("partial: %v %v %+v", err, res.Err(), res.IPVS)
	}
	dumps := b.link.Dumps
	res, err := b.a.FullFrom(after, nodeAddrs, rb, nil)
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if b.link.Dumps != dumps || !res.AddressesDumped {
		t.Errorf("FullFrom dumped kube-ipvs0 %d times (want 0: the read did), AddressesDumped %v", b.link.Dumps-dumps, res.AddressesDumped)
	}
	if res.IPVS.ServicesAdded != 1 || res.IPVS.ServicesDeleted != 0 || res.Drift[ipvs.DriftVirtualServer] != 1 {
		t.Errorf("FullFrom: %+v, drift %+v; want a's :443 added back, and nothing else", res.IPVS, res.Drift)
	}
	table := b.table.String()
	for _, want := range []string{"10.96.0.1:80", "10.96.0.1:443", "10.96.0.3:80", "10.96.0.3:443"} {
		if !strings.Contains(table, want) {
			t.Errorf("%s missing:\n%s", want, table)
		}
	}
	if strings.Contains(table, "10.96.0.2") {
		t.Errorf("b's virtual servers came back:\n%s", table)
	}
	if got := b.link.String(); got != "10.96.0.1/32\n10.96.0.3/32\n" {
		t.Errorf("addresses %q", got)
	}
}

// TestFullFromAddressesReadBeside: with kube-ipvs0 watched, so that
// partial syncs trust the address manager's view, the full sync's address
// dump is the read's, through the manager's second socket: an address a
// partial sync binds or unbinds during the read keeps what the partial
// sync did, one the watch missed is found as drift and removed, and
// FullFrom dumps nothing itself.
func TestFullFromAddressesReadBeside(t *testing.T) {
	b := newBed(t, setGuard{})
	m := addrmgr.NewManager(b.link, setGuard{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Watch(ctx, func() {}); err != nil {
		t.Fatal(err)
	}
	b.a = New(ipvs.NewReconciler(b.table, ipvs.Options{}), m, b.rules, nil)
	nodeAddrs := []netip.Addr{nodeIP}
	if res, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), nodeAddrs); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	b.link.Flush()
	// The second socket sees the device as it was, with an address the
	// watch missed.
	m.SetReader(addrmgrtest.NewFakeLink(pfxs("10.96.0.1/32", "10.96.0.2/32", "10.96.0.99/32")...))
	rb, err := b.a.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	after := state("ns/a=10.96.0.1", "ns/c=10.96.0.3")
	dumps := b.link.Dumps
	if res, err := b.a.Partial(after, svcNames("ns/b", "ns/c")...); err != nil || res.Err() != nil || res.AddressesDumped {
		t.Fatalf("partial: %v %v, dumped %v (the watched view is trusted)", err, res.Err(), res.AddressesDumped)
	}
	b.link.Flush()
	res, err := b.a.FullFrom(after, nodeAddrs, rb, nil)
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if b.link.Dumps != dumps {
		t.Errorf("kube-ipvs0 dumped %d times through the manager's own socket, want 0", b.link.Dumps-dumps)
	}
	if res.Drift[addrmgr.DriftAddress] != 1 || res.Unbind.Unbound != 1 || res.Bind.Bound != 0 {
		t.Errorf("drift %+v, unbound %d, bound %d: want 10.96.0.99 alone found and removed", res.Drift, res.Unbind.Unbound, res.Bind.Bound)
	}
	if got := b.link.String(); got != "10.96.0.1/32\n10.96.0.3/32\n" {
		t.Errorf("addresses %q", got)
	}
	if !m.Bound(netip.MustParseAddr("10.96.0.3")) || m.Bound(netip.MustParseAddr("10.96.0.2")) {
		t.Error("the partial sync's bind or unbind lost to the older read")
	}
}

func pfxs(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, x := range s {
		out[i] = netip.MustParsePrefix(x)
	}
	return out
}

// readbackRules is fakeRules whose read beside the loop is read.
type readbackRules struct {
	fakeRules
	begun, fullFroms int
	read             *iptables.Readback
}

func (f *readbackRules) BeginFull() func() (*iptables.Readback, error) {
	f.begun++
	return func() (*iptables.Readback, error) { return f.read, nil }
}

func (f *readbackRules) FullFrom(d iptables.Desired, rb *iptables.Readback, _ layer.Turn[iptables.Desired]) (*iptables.Result, error) {
	if rb != f.read {
		return nil, errors.New("FullFrom got another read than BeginFull's")
	}
	f.fullFroms++
	return f.Partial(d)
}

// TestFullFromReadsTheRulesToo: with a Rules layer that reads beside the
// loop, BeginFull's read reads it too, and FullFrom hands it that read
// rather than asking for a Full.
func TestFullFromReadsTheRulesToo(t *testing.T) {
	b := newBed(t, setGuard{})
	rr := &readbackRules{read: &iptables.Readback{}}
	b.a.rules, b.rules = rr, &rr.fakeRules
	st := state("ns/a=10.96.0.1")
	if res, err := b.a.Full(st, []netip.Addr{nodeIP}); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	rb, err := b.a.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b.a.FullFrom(st, []netip.Addr{nodeIP}, rb, nil); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if rr.begun != 1 || rr.fullFroms != 1 || rr.fulls != 1 {
		t.Errorf("rules: %d reads begun, %d FullFrom, %d Full; want 1, 1 and the first sync's Full", rr.begun, rr.fullFroms, rr.fulls)
	}
}
