package daemon

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
)

// nopApplier applies nothing: the benchmark measures the loop's own work.
type nopApplier struct{}

func (nopApplier) Full(*planner.State, []netip.Addr) (*applier.Result, error) {
	return &applier.Result{}, nil
}

func (nopApplier) Partial(*planner.State, applier.Index, ...types.NamespacedName) (*applier.Result, error) {
	return &applier.Result{}, nil
}

// BenchmarkPartialPlan is the user-space cost of one EndpointSlice change
// with 10,000 services × 10 endpoints present: the changed service read
// from the source, planned again, and the state patched (the incremental
// plan), as a partial sync does before the applier. The kernel's share is
// the applier's (BenchmarkKernelSync).
//
//	go test -run '^$' -bench BenchmarkPartialPlan -benchmem ./internal/drive/daemon/
func BenchmarkPartialPlan(b *testing.B) {
	src := newFakeSource()
	for i := 0; i < 10000; i++ {
		eps := make([]string, 10)
		for j := range eps {
			eps[j] = netip.AddrFrom4([4]byte{10, 244, byte(i >> 4), byte((i&15)<<4 | j)}).String()
		}
		src.set(fmt.Sprintf("s%05d", i), netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String(), time.Time{}, eps...)
	}
	src.TakeChanges()
	l := &Loop{Source: src, Applier: nopApplier{}, Options: testOpts}
	l.defaults()
	var nodes nodeInputs
	nodes.nodes, nodes.refusals = src.Nodes()
	if _, _, err := l.apply(&SyncReport{Full: true, Replanned: true}, testOpts, nodes, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		src.set("s00042", "10.96.0.42", time.Time{}, "10.244.200.1", fmt.Sprintf("10.244.201.%d", i%250))
		ch := src.TakeChanges()
		st, _, err := l.apply(&SyncReport{Services: ch.Services}, testOpts, nodeInputs{}, nil)
		if err != nil || len(st.VirtualServers) != 10000 {
			b.Fatalf("%v, %d virtual servers", err, len(st.VirtualServers))
		}
	}
}
