package applier

import (
	"errors"
	"fmt"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// ARPRules is a Rules layer that also keeps the nftables table of
// --strict-arp-vips (*iptables.Syncer): no ARP answer for the IPv4
// addresses of kube-ipvs0.
type ARPRules interface {
	// SyncARP makes the table hold the IPv4 addresses of addrs,
	// kube-ipvs0's planned ones: a full sync reads and repairs it, a
	// partial one writes the elements that changed.
	SyncARP(addrs []netip.Prefix, full bool) (layer.Drift, error)
	// CleanupARP removes the table.
	CleanupARP() error
}

var _ ARPRules = (*iptables.Syncer)(nil)

// syncARP runs in the rules step: after the unbind step, so an address is
// unbound before the node answers ARP for it again, and before the bind
// step, so the node never answers for a VIP it binds. A partial sync whose
// plan kept its addresses (the same slice: the planner patches a changed
// one into a new slice) writes nothing.
func (s *syncRun) syncARP() {
	a := s.a
	ar, ok := a.rules.(ARPRules)
	if !ok {
		return
	}
	addrs := s.st.Addresses
	if !s.full && a.arpFrom.same(addrs) {
		return
	}
	a.arpFrom = prefixes{}
	drift, err := ar.SyncARP(addrs, s.full)
	s.res.Drift.Merge(drift)
	if err != nil {
		s.res.RulesErr = errors.Join(s.res.RulesErr, err)
		s.res.add(model.ServicePortName{}, fmt.Errorf("strict ARP for the VIPs: %w", err))
		return
	}
	a.arpFrom = prefixes{addrs}
}

// cleanupARP removes the table of --strict-arp-vips in a cleanup.
func (a *Applier) cleanupARP(res *Result) {
	if ar, ok := a.rules.(ARPRules); ok {
		if err := ar.CleanupARP(); err != nil {
			res.RulesErr = errors.Join(res.RulesErr, err)
			res.add(model.ServicePortName{}, fmt.Errorf("strict ARP for the VIPs cleanup: %w", err))
		}
	}
}

// prefixes remembers the slice of addresses a sync last gave the ARP table.
type prefixes struct{ p []netip.Prefix }

// same says addrs is that very slice: the same backing array and length.
func (p prefixes) same(addrs []netip.Prefix) bool {
	if p.p == nil || len(p.p) != len(addrs) {
		return false
	}
	return len(addrs) == 0 || &p.p[0] == &addrs[0]
}
