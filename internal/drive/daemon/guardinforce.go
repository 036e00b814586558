package daemon

import (
	"net/netip"
	"sync/atomic"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
)

// guardInForce is the guard in force for the address manager: the planner's own
// (planner.Incremental.Guard), replaced after each full plan, because
// node addresses change while the proxy runs. It is an addrmgr.Protector
// and Fingerprinter, safe for concurrent use.
type guardInForce struct {
	g atomic.Pointer[guard.Guard]
}

var (
	_ addrmgr.Protector     = (*guardInForce)(nil)
	_ addrmgr.Fingerprinter = (*guardInForce)(nil)
)

// newGuardInForce returns a holder of g; nil protects only the never-a-VIP
// classes until the first Set.
func newGuardInForce(g *guard.Guard) *guardInForce {
	h := &guardInForce{}
	if g == nil {
		g = guard.New(guard.Inputs{})
	}
	h.g.Store(g)
	return h
}

// Set makes g the guard in force.
func (h *guardInForce) Set(g *guard.Guard) { h.g.Store(g) }

// Check implements addrmgr.Protector: the verdict of the guard in force.
func (h *guardInForce) Check(addr netip.Addr) guard.Verdict { return h.g.Load().Check(addr) }

// Fingerprint implements addrmgr.Fingerprinter: the guard in force's, so
// the address manager checks the bound addresses again only when it
// changed.
func (h *guardInForce) Fingerprint() uint64 { return h.g.Load().Fingerprint() }
