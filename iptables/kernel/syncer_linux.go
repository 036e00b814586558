package kernel

import (
	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// NewSyncer is the iptables.Syncer of the caller's network namespace: its
// ipset netlink socket is opened now, in the calling thread's namespace,
// and the iptables binaries of a family are looked up on its first use.
func NewSyncer(log *zap.Logger) (*iptables.Syncer, error) {
	s, err := OpenSets()
	if err != nil {
		return nil, err
	}
	return iptables.NewSyncer(s, func(family string) (iptables.RuleRunner, error) { return NewRunner(family) }, log), nil
}
