package applier

import (
	"errors"
	"fmt"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// Taker is a Rules layer that leaves another proxy's rules serving until
// the proxy's own state serves (*iptables.Syncer): FinishTakeover removes
// them, after a full sync's bind.
type Taker interface {
	FinishTakeover() error
}

var _ Taker = (*iptables.Syncer)(nil)

// finishTakeover removes what another proxy left serving in front of the
// proxy's own state (Taker), after the bind.
func (s *syncRun) finishTakeover() {
	tk, ok := s.a.rules.(Taker)
	if !ok {
		return
	}
	if err := tk.FinishTakeover(); err != nil {
		s.res.RulesErr = errors.Join(s.res.RulesErr, err)
		s.res.add(model.ServicePortName{}, fmt.Errorf("iptables: %w", err))
	}
	s.lap(&s.res.Took.Rules)
}
