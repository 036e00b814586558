package daemon

import (
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
)

// readbackApplier is the fake applier as a Readbacker: the periodic full
// sync's read waits until the test sends on gate what it returns.
type readbackApplier struct {
	*fakeApplier
	gate  chan error
	begun atomic.Int32
	// fullFromAddrs are the node addresses the last FullFrom got.
	fullFromAddrs []netip.Addr
}

var _ Readbacker = (*readbackApplier)(nil)

func (r *readbackApplier) BeginFull() func() (*applier.Readback, error) {
	r.begun.Add(1)
	return func() (*applier.Readback, error) {
		if err := <-r.gate; err != nil {
			return nil, err
		}
		return &applier.Readback{}, nil
	}
}

func (r *readbackApplier) FullFrom(st *planner.State, nodeAddrs []netip.Addr, rb *applier.Readback, _ applier.Turn) (*applier.Result, error) {
	if rb == nil {
		panic("FullFrom without a read")
	}
	res, err := r.fakeApplier.sync(st, true, nil)
	r.mu.Lock()
	r.calls[len(r.calls)-1].readback = true
	r.fullFromAddrs = slices.Clone(nodeAddrs)
	r.mu.Unlock()
	return res, err
}

func newReadbackHarness(t *testing.T) (*harness, *readbackApplier) {
	t.Helper()
	h := newHarness(t, 0)
	rba := &readbackApplier{fakeApplier: h.app, gate: make(chan error)}
	h.loop.Applier = rba
	return h, rba
}

// waitBegun waits until the loop has started n periodic reads.
func (rba *readbackApplier) waitBegun(t *testing.T, n int32) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); rba.begun.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d periodic reads begun, want %d", rba.begun.Load(), n)
		}
	}
}

// waitCallList waits for n applier calls, without waitCalls' timer check:
// while the read is under way the loop waits on no timer.
func waitCallList(t *testing.T, h *harness, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if calls := h.app.callList(); len(calls) >= n && h.synced.Load() >= int64(len(calls)) {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d calls; have %v", n, h.app.callList())
		}
	}
}

// TestPeriodicFullSyncReadsBesideTheLoop: the periodic full sync reads the
// IPVS table on another goroutine; a change meanwhile is applied at once
// by a partial sync, and the full sync runs from the read when it is back.
// The first full sync reads the table itself.
func TestPeriodicFullSyncReadsBesideTheLoop(t *testing.T) {
	h, rba := newReadbackHarness(t)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	h.src.set("b", "10.96.0.2", time.Time{}, "10.244.0.2")
	close(h.src.synced)
	if calls := h.waitCalls(1); calls[0] != "full" {
		t.Fatalf("first sync %v, want a full sync that reads the table itself", calls)
	}
	h.clock.Step(30 * time.Second)
	rba.waitBegun(t, 1)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.3")
	if calls := waitCallList(t, h, 2); calls[1] != "partial ns/a" {
		t.Fatalf("calls %v: the change was not applied while the table was read", calls)
	}
	h.wantKernel()
	rba.gate <- nil
	calls := h.waitCalls(3)
	if want := []string{"full", "partial ns/a", "full from readback"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	h.wantKernel()
	if st := h.loop.Stats(); st.Full != 2 || st.Partial != 1 {
		t.Errorf("stats %+v", st)
	}
	// The next period reads again.
	h.clock.Step(30 * time.Second)
	rba.waitBegun(t, 2)
	rba.gate <- nil
	if calls := h.waitCalls(4); calls[3] != "full from readback" {
		t.Fatalf("calls %v", calls)
	}
}

// TestReadbackDroppedByAnEarlierFullSync: a full sync the loop cannot
// defer (this node's own Node changed) runs while the read is under way; the read,
// older than that sync, is dropped when it comes back, and the next
// period reads anew. A read that fails leaves the full sync to read the
// table itself.
func TestReadbackDroppedByAnEarlierFullSync(t *testing.T) {
	h, rba := newReadbackHarness(t)
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	h.clock.Step(30 * time.Second)
	rba.waitBegun(t, 1)
	h.src.setNodes(model.Node{Name: "n1", Addresses: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
		Labels: map[string]string{planner.ZoneLabel: "z2"}})
	if calls := waitCallList(t, h, 2); calls[1] != "full" {
		t.Fatalf("calls %v, want a full sync for the Node change", calls)
	}
	rba.gate <- nil
	h.settle(2)
	h.wantKernel()

	h.clock.Step(30 * time.Second)
	rba.waitBegun(t, 2)
	rba.gate <- errors.New("netlink: no buffer space")
	calls := h.waitCalls(3)
	if calls[2] != "full" {
		t.Fatalf("calls %v, want the full sync to read the table itself after the failed read", calls)
	}
	if n := h.logs.FilterMessageSnippet("reading the kernel beside the loop for the periodic full sync failed").Len(); n != 1 {
		t.Errorf("%d warnings of the failed read, want 1", n)
	}
}

// TestPeriodicFullSyncReadsTheNodeBeside: the periodic full sync's read
// beside the loop reads the node (addresses, routes, resolvers, sockets)
// after the kernel, and the full sync plans with that read instead of
// reading the node again while it holds the loop; a full sync without a
// read (the first) reads the node itself.
func TestPeriodicFullSyncReadsTheNodeBeside(t *testing.T) {
	h, rba := newReadbackHarness(t)
	node := &fakeNode{local: []netip.Addr{netip.MustParseAddr("192.168.0.1")}}
	h.loop.Env = node.env
	h.src.set("a", "10.96.0.1", time.Time{}, "10.244.0.1")
	close(h.src.synced)
	h.waitCalls(1)
	if n := node.fullReads.Load(); n != 1 {
		t.Fatalf("the first full sync read the node %d times, want 1", n)
	}
	h.clock.Step(30 * time.Second)
	rba.waitBegun(t, 1)
	// The node gains an address while the kernel is read: the read of the
	// node after it sees it.
	node.add(netip.MustParseAddr("192.168.0.2"))
	rba.gate <- nil
	if calls := h.waitCalls(2); calls[1] != "full from readback" {
		t.Fatalf("calls %v", calls)
	}
	if n := node.fullReads.Load(); n != 2 {
		t.Errorf("the node read %d times in all, want 2: once by the first sync, once beside the loop (the full sync from the read reads it no more)", n)
	}
	rba.mu.Lock()
	got := rba.fullFromAddrs
	rba.mu.Unlock()
	if want := []netip.Addr{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("192.168.0.2")}; !slices.Equal(got, want) {
		t.Errorf("FullFrom planned for the node addresses %v, want the read's %v", got, want)
	}
}
