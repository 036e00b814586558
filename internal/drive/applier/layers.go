package applier

import (
	"fmt"
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The three kernel layers, each driven through the layers' one contract
// (layer.Layer): syncLayer runs a sync's step of any of them, and
// BeginFull begins each one's read beside the loop.
var (
	_ layer.Layer[ipvs.Desired, *ipvs.Dump, *ipvs.Result]                 = (*ipvs.Reconciler)(nil)
	_ layer.Layer[addrmgr.Desired, []netip.Prefix, *addrmgr.Result]       = (*addrmgr.Manager)(nil)
	_ layer.Layer[iptables.Desired, *iptables.Readback, *iptables.Result] = (*iptables.Syncer)(nil)
)

// syncLayer syncs l to d as this sync runs: a full sync from the read
// beside the loop when there is one (read picks the layer's share of it),
// giving the changes waiting their turn (turn, when the layer syncs in
// batches); a Full otherwise; a partial sync's Partial.
func syncLayer[D, R, Res any](s *syncRun, l layer.Layer[D, R, Res], d D, read func(*Readback) R, turn layer.Turn[D]) (Res, error) {
	switch {
	case s.full && s.rb != nil:
		return l.FullFrom(d, read(s.rb), turn)
	case s.full:
		return l.Full(d)
	}
	return l.Partial(d)
}

// dump reads kube-ipvs0 and decides what leaves it: always in a full sync
// (from the read beside the loop, rb, when there is one); in a partial one
// only when the address manager's watch saw a change by others or lost
// events (or there is no watch), its view being kube-ipvs0's otherwise.
func (s *syncRun) dump() (*addrmgr.Result, error) {
	res := s.res
	read, err := syncLayer(s, s.a.addrs, addrmgr.Desired{Addresses: s.st.Addresses}, func(rb *Readback) []netip.Prefix { return rb.addrs }, nil)
	if err != nil {
		return nil, err
	}
	res.AddressesDumped = read.Dumped
	res.Drift.Merge(read.Drift)
	s.lap(&res.Took.Dump)
	return read, nil
}

// reconcileIPVS makes the IPVS table hold the selected virtual servers: all
// of them against one dump in a full sync, bound being kube-ipvs0 as
// dumped; the changed services' against the mirror in a partial one. An
// error (the table could not be read, or was never read) stops the sync:
// addresses stay as they are rather than be bound without their virtual
// servers.
func (s *syncRun) reconcileIPVS(selected []ipvs.VirtualServer, bound []netip.Prefix) error {
	a, res := s.a, s.res
	d := ipvs.Desired{VirtualServers: selected, Changed: s.changed.names()}
	if s.full {
		own := ipvs.Ownership{NodeAddrs: a.nodeAddrs}
		for _, p := range bound {
			own.BoundAddrs = append(own.BoundAddrs, p.Addr())
		}
		for _, p := range s.st.Addresses {
			own.BoundAddrs = append(own.BoundAddrs, p.Addr())
		}
		d = ipvs.Desired{VirtualServers: s.st.VirtualServers, Own: own}
	}
	var err error
	res.IPVS, err = syncLayer(s, a.ipvs, d, func(rb *Readback) *ipvs.Dump { return rb.ipvs }, s.ipvsTurn())
	if err != nil {
		return fmt.Errorf("ipvs sync: %w", err)
	}
	for _, f := range res.IPVS.Failures {
		res.add(f.ID.Service, f)
	}
	res.Drift.Merge(res.IPVS.Drift)
	s.lap(&res.Took.IPVS)
	return nil
}

// syncRules applies the ipsets, then the iptables rules.
func (s *syncRun) syncRules() {
	a, res := s.a, s.res
	if a.rules != nil {
		d := iptables.Desired{Sets: s.st.IPSets, Rules: s.st.Rulesets}
		rres, err := syncLayer(s, a.rules, d, func(rb *Readback) *iptables.Readback { return rb.rules }, nil)
		if err != nil {
			res.RulesErr = err
			res.add(model.ServicePortName{}, fmt.Errorf("%s: %w", iptables.PartSync, err))
		} else {
			addRules(res, rres)
		}
		s.syncARP()
	}
	s.lap(&res.Took.Rules)
}

// addRules adds the Rules layer's result to res: its failures, which
// belong to no service, and its drift.
func addRules(res *Result, rres *iptables.Result) {
	if err := rres.Err(); err != nil {
		res.RulesErr = err
		for _, f := range rres.Failures {
			res.add(model.ServicePortName{}, f)
		}
	}
	res.Drift.Merge(rres.Drift)
}
