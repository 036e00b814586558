package applier

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Turn is a periodic full sync's turn for the changes that arrived while
// it runs (the full sync in turns, docs/architecture.md): FullFrom calls
// it before its kube-ipvs0 dump, before its IPVS step, between batches of
// its IPVS walk (layer.Turn), after the IPVS step and after the ipsets and
// iptables. It applies the waiting changes with
// Partial, as the sync loop applies any change, and returns the state
// they leave, which the full sync goes on with; nil when nothing was
// waiting.
//
// The full sync's earlier steps stay right for the newer state: what a
// turn changed it applied whole (its virtual servers, addresses, set
// entries and rules), the IPVS walk goes on in the newer list after the
// last key it applied (layer.Turn), and the ipsets and rules layers keep
// the writes made since their read (iptables.Syncer.FullFrom).
type Turn func() *planner.State

// takeTurn gives the waiting changes a turn, if the sync has a Turn, and
// goes on with the state they leave. The turn is timed by itself
// (Timings.Turns): the step it interrupted is timed without it.
func (s *syncRun) takeTurn() bool {
	if s.turn == nil {
		return false
	}
	start := s.a.Clock.Now()
	s.a.turning = true
	st := s.turn()
	s.a.turning = false
	took := s.a.Clock.Since(start)
	s.mark = s.mark.Add(took)
	if st == nil {
		return false
	}
	s.res.Turns++
	s.res.Took.Turns += took
	s.st = st
	// byAddr's map, if built, is the older state's.
	s.byAddrMap = nil
	return true
}

// ipvsTurn is takeTurn as the IPVS walk takes it: the virtual servers of
// the state the turn left.
func (s *syncRun) ipvsTurn() layer.Turn[ipvs.Desired] {
	if s.turn == nil {
		return nil
	}
	return func() (ipvs.Desired, bool) {
		if !s.takeTurn() {
			return ipvs.Desired{}, false
		}
		return ipvs.Desired{VirtualServers: s.st.VirtualServers}, true
	}
}
