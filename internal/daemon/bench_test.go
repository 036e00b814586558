package daemon

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
)

// BenchmarkPartialPlan is the user-space cost of one EndpointSlice change
// with 10,000 services × 10 endpoints present: the incremental model
// (one service converted again, the cluster assembled) and planner.Plan.
// The kernel's share is the applier's (docs/benchmarks.md).
//
//	go test -run '^$' -bench BenchmarkPartialPlan -benchmem ./internal/daemon/
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
	l := &Loop{Source: src}
	o := testOpts
	l.cluster(true, nil)
	for _, withPlan := range []bool{false, true} {
		name := "model"
		if withPlan {
			name = "model+plan"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				src.set("s00042", "10.96.0.42", time.Time{}, "10.244.200.1", fmt.Sprintf("10.244.201.%d", i%250))
				ch := src.TakeChanges()
				c := l.cluster(false, ch.Services)
				if len(c.Services) != 10000 {
					b.Fatalf("%d services", len(c.Services))
				}
				if withPlan {
					if st := planner.Plan(c, o); len(st.VirtualServers) < 10000 {
						b.Fatalf("%d virtual servers", len(st.VirtualServers))
					}
				}
			}
		})
	}
}
