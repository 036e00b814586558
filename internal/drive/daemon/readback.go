package daemon

import (
	"net/netip"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
)

// The periodic full sync's read beside the loop (docs/architecture.md, 2.
// Convert): the loop starts it when the period is up, goes on with partial
// syncs, and runs the full sync from what it read (Loop.reading,
// Loop.read; Run receives the result): the kernel (Readbacker), then the
// node's addresses, routes, resolvers and listening sockets (Loop.Env).

// Readbacker is an Applier whose full sync can read the kernel (the IPVS
// table, the ipsets, the iptables tables) beside the loop:
// *applier.Applier. The loop uses it for the periodic full sync, so that
// changes are applied while the kernel is read.
type Readbacker interface {
	// BeginFull starts the full sync; the read it returns runs on another
	// goroutine.
	BeginFull() func() (*applier.Readback, error)
	// FullFrom is Full with the kernel as the read found it, giving the
	// changes that arrive meanwhile their turns (applier.Turn).
	FullFrom(st *planner.State, nodeAddrs []netip.Addr, rb *applier.Readback, turn applier.Turn) (*applier.Result, error)
}

// readResult is what a periodic full sync's read returned.
type readResult struct {
	rb  *applier.Readback
	err error
	// env is the node as read after the kernel, when envRead (envErr its
	// error).
	env     nodeenv.Env
	envErr  error
	envRead bool
	envTook time.Duration
}

// periodicFull makes the periodic full sync due, or, with a Readbacker,
// starts its read of the kernel on another goroutine: the full sync is
// then due when the read is back (Run), and partial syncs go on
// meanwhile.
func (l *Loop) periodicFull() {
	rba, ok := l.Applier.(Readbacker)
	if !ok {
		l.needFull = true
		return
	}
	if l.reading != nil {
		return
	}
	read, readEnv, clk := rba.BeginFull(), l.Env, l.Clock
	done := make(chan readResult, 1)
	l.reading = done
	go func() {
		var r readResult
		r.rb, r.err = read()
		if readEnv != nil {
			start := clk.Now()
			r.env, r.envErr = readEnv(true)
			r.envRead, r.envTook = true, clk.Since(start)
		}
		done <- r
	}()
}

// nodeEnv reads the node for a sync (Env): a full sync whose read beside
// the loop read the node too takes that read, at most as old as the
// kernel's. A change of the node's addresses after it is met as any
// other: the next sync's read differs from what this one planned with,
// and plans everything again.
func (l *Loop) nodeEnv(full bool, stages *Stages) (nodeenv.Env, error) {
	if r := l.read; full && r != nil && r.envRead && r.envErr == nil {
		stages.ReadEnv = r.envTook
		return r.env, nil
	}
	return l.Env(full)
}
