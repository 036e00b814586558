package daemon

import (
	"net/netip"
	"sync/atomic"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
)

// Guard is the guard in force for the address manager: the planner's own
// (planner.Incremental.Guard), replaced after each full plan, because
// node addresses change while the proxy runs. It is an addrmgr.Protector
// and Fingerprinter, safe for concurrent use.
type Guard struct {
	g atomic.Pointer[guard.Guard]
}

var (
	_ addrmgr.Protector     = (*Guard)(nil)
	_ addrmgr.Fingerprinter = (*Guard)(nil)
)

// NewGuard returns a holder of g; nil protects only the never-a-VIP
// classes until the first Set.
func NewGuard(g *guard.Guard) *Guard {
	h := &Guard{}
	if g == nil {
		g = guard.New(guard.Inputs{})
	}
	h.g.Store(g)
	return h
}

// Set makes g the guard in force.
func (h *Guard) Set(g *guard.Guard) { h.g.Store(g) }

// Check implements addrmgr.Protector: the verdict of the guard in force.
func (h *Guard) Check(addr netip.Addr) guard.Verdict { return h.g.Load().Check(addr) }

// Fingerprint implements addrmgr.Fingerprinter: the guard in force's, so
// the address manager checks the bound addresses again only when it
// changed.
func (h *Guard) Fingerprint() uint64 { return h.g.Load().Fingerprint() }
