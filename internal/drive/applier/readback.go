package applier

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Readback is the kernel state a full sync reads, read beside the sync
// loop: the IPVS table, most of a full sync at scale (see
// BenchmarkReadbackFullSyncScale), kube-ipvs0's addresses, and, with a
// Rules layer, the ipsets and the iptables tables.
type Readback struct {
	ipvs  *ipvs.Dump
	addrs []netip.Prefix
	rules *iptables.Readback
	// Took is how long the read took; TookIPVS, TookAddrs and TookRules
	// its parts.
	Took, TookIPVS, TookAddrs, TookRules time.Duration
}

// BeginFull starts a full sync whose IPVS dump, kube-ipvs0 dump, and
// ipsets and tables read, run on another goroutine: it returns the read,
// to run once there (it touches nothing else of the applier). Partial
// syncs may run meanwhile; FullFrom then takes what the read returned.
// The layers keep their own view of what those partial syncs wrote
// (layer.Layer's BeginFull).
func (a *Applier) BeginFull() func() (*Readback, error) {
	readIPVS, readAddrs := a.ipvs.BeginFull(), a.addrs.BeginFull()
	var readRules func() (*iptables.Readback, error)
	if a.rules != nil {
		readRules = a.rules.BeginFull()
	}
	clk := a.Clock
	return func() (*Readback, error) {
		start := clk.Now()
		rb := &Readback{}
		var err error
		if rb.ipvs, err = timed(clk, readIPVS, &rb.TookIPVS); err != nil {
			return nil, fmt.Errorf("read the IPVS table: %w", err)
		}
		if rb.addrs, err = timed(clk, readAddrs, &rb.TookAddrs); err != nil {
			return nil, fmt.Errorf("read kube-ipvs0: %w", err)
		}
		if readRules != nil {
			if rb.rules, err = timed(clk, readRules, &rb.TookRules); err != nil {
				return nil, fmt.Errorf("read the ipsets and iptables: %w", err)
			}
		}
		rb.Took = clk.Since(start)
		return rb, nil
	}
}

// timed runs a layer's read beside the loop, and tells how long it took.
func timed[R any](clk clock.PassiveClock, read func() (R, error), took *time.Duration) (R, error) {
	start := clk.Now()
	r, err := read()
	*took = clk.Since(start)
	return r, err
}

// FullFrom is Full with the IPVS table as rb, the read BeginFull returned,
// found it. The error wraps layer.ErrNoRead when a Full ran since BeginFull
// (a full sync the loop could not defer): the read is then stale.
//
// turn, when not nil, gives the changes that arrive while it runs their
// turn between its steps (Turn), and the sync goes on with the state turn
// returns: st's virtual servers must be sorted by ipvs.CompareKeys, as a
// planner's are.
func (a *Applier) FullFrom(st *planner.State, nodeAddrs []netip.Addr, rb *Readback, turn Turn) (*Result, error) {
	a.nodeAddrs = slices.Clone(nodeAddrs)
	return a.sync(st, true, nil, nil, rb, turn)
}
