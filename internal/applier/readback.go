package applier

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Readback is the kernel state a full sync reads, read off the sync loop:
// the IPVS table, most of a full sync at scale (at 10,000 services ×
// 10 endpoints under TCG, about three quarters of it). kube-ipvs0, the
// ipsets and the rules are still read by the sync itself.
type Readback struct {
	ipvs []ipvs.VirtualServer
	// Took is how long the read took.
	Took time.Duration
}

// BeginFull starts a full sync whose IPVS dump is read on another
// goroutine: it returns the read, to run once there (it touches nothing
// else of the applier). Partial syncs may run meanwhile; FullFrom then
// takes what the read returned. The reconciler keeps its own view of the
// virtual servers those partial syncs wrote (ipvs.Reconciler.BeginRead).
func (a *Applier) BeginFull() func() (*Readback, error) {
	read := a.ipvs.BeginRead()
	clk := a.Clock
	return func() (*Readback, error) {
		start := clk.Now()
		vss, err := read()
		if err != nil {
			return nil, fmt.Errorf("read the IPVS table: %w", err)
		}
		return &Readback{ipvs: vss, Took: clk.Since(start)}, nil
	}
}

// FullFrom is Full with the IPVS table as rb, the read BeginFull returned,
// found it. The error is ipvs.ErrNoRead when a Full ran since BeginFull
// (a full sync the loop could not defer): the read is then stale.
func (a *Applier) FullFrom(st *planner.State, nodeAddrs []netip.Addr, rb *Readback) (*Result, error) {
	a.nodeAddrs = slices.Clone(nodeAddrs)
	return a.sync(st, true, nil, nil, rb)
}
