package kernel

import (
	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// NewSyncer is the iptables.Syncer of the caller's network namespace: its
// ipset and nftables netlink sockets are opened now, in the calling
// thread's namespace, and the iptables binaries of a family are looked up
// on its first use.
func NewSyncer(log *zap.Logger) (*iptables.Syncer, error) {
	s, err := OpenSets()
	if err != nil {
		return nil, err
	}
	sy := iptables.NewSyncer(s, func(family string) (iptables.RuleRunner, error) { return NewRunner(family) }, log)
	// Without nftables netlink (an old kernel) there is no kube-proxy
	// nftables mode to take over.
	if nft, err := OpenNFTables(); err == nil {
		sy.NFT = nft
	}
	return sy, nil
}
