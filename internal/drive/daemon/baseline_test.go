package daemon

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"
)

// After churn ends and the cluster is back to what it was, the loop's
// memory and goroutines return to their baseline: 20 rounds each create
// 1,000 services with unique names (and endpoints), change them and delete
// them again, through partial syncs and full resyncs, beside 2,000 steady
// services. A model, plan or change-tracking entry kept for a deleted
// service (20,000 of them) would show as heap growth. The kernel half (the
// applier's mirrors) is checked the same way by the soak test in the VM.
func TestMemoryAndGoroutinesReturnToBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("churns 20,000 services")
	}
	h := newHarness(t, 0)
	vip := func(i int) string { return netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String() }
	ep := func(i, j int) string {
		return netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)&0xf0 | byte(j)}).String()
	}
	for i := range 2000 {
		h.src.set(fmt.Sprintf("steady%04d", i), vip(i), time.Time{}, ep(i, 1), ep(i, 2))
	}
	close(h.src.synced)
	waitConverged(t, h)

	measure := func() (heap uint64, goroutines int) {
		for range 3 {
			runtime.GC()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc, runtime.NumGoroutine()
	}
	baseHeap, baseG := measure()

	for round := range 20 {
		// Each step is applied before the next, so every service really
		// enters the model, the plan and the kernel, and leaves them.
		for i := range 1000 {
			h.src.set(fmt.Sprintf("churn%02d-%04d", round, i), vip(2000+i), time.Time{}, ep(2000+i, 3))
		}
		waitConverged(t, h)
		if round%5 == 4 {
			// A full resync in the middle of the churn.
			h.clock.Step(31 * time.Second)
		}
		for i := range 1000 {
			h.src.set(fmt.Sprintf("churn%02d-%04d", round, i), vip(2000+i), time.Time{}, ep(2000+i, 4), ep(2000+i, 5))
		}
		waitConverged(t, h)
		for i := range 1000 {
			h.src.del(fmt.Sprintf("churn%02d-%04d", round, i))
		}
		waitConverged(t, h)
	}
	h.clock.Step(31 * time.Second)
	waitConverged(t, h)

	heap, g := measure()
	t.Logf("heap %.1f MiB -> %.1f MiB, goroutines %d -> %d after 20,000 services created, changed and deleted",
		float64(baseHeap)/(1<<20), float64(heap)/(1<<20), baseG, g)
	if limit := baseHeap + baseHeap/4 + 4<<20; heap > limit {
		t.Errorf("heap %d bytes after the churn, baseline %d (limit %d)", heap, baseHeap, limit)
	}
	if g > baseG {
		t.Errorf("%d goroutines after the churn, %d before", g, baseG)
	}
}

// waitConverged waits until the fake kernel holds the plan of the source and
// nothing is pending.
func waitConverged(t *testing.T, h *harness) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// The fake applier signals every apply on a buffered channel that
		// other tests read; drain it so that hundreds of syncs never block.
		for len(h.app.entered) > 0 {
			<-h.app.entered
		}
		// Its call log too: it keeps every changed-service list (the
		// fake's memory, not the loop's).
		h.app.mu.Lock()
		h.app.calls = nil
		h.app.mu.Unlock()
		if h.src.Pending() == 0 && len(h.src.notify) == 0 && h.clock.HasWaiters() &&
			slices.Equal(h.app.dump(), planned(h.src, testOpts)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged: %d pending", h.src.Pending())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
