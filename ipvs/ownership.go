package ipvs

import (
	"maps"
	"net/netip"
	"slices"

	"go.uber.org/zap"
)

// Ownership says which virtual servers found in the kernel are the proxy's,
// so that a restarted proxy adopts what an earlier one created and deletes
// it once it is no longer desired. The rule, derived from kernel state only:
//
//   - a virtual server on an address bound on kube-ipvs0 is ours (every
//     address there is the proxy's: ClusterIPs, externalIPs, LoadBalancer
//     IPs; anything else there is removed by the address manager);
//   - a virtual server on one of the node's own addresses whose port lies in
//     the NodePort range is a NodePort server, and ours;
//   - everything inside --ipvs-exclude-cidrs is never ours;
//   - anything else (keepalived or kube-vip on another address, a manual
//     ipvsadm entry on a node address outside the NodePort range) is
//     foreign and never touched.
//
// A virtual server the planner desires is managed whatever its address.
// A virtual server this process created or adopted stays managed across
// its full syncs. What the rule cannot see — an L4-only virtual server on
// a node address for a protected externalIP (not bound, port outside the
// NodePort range), a virtual server whose address was unbound before it
// was deleted — is kept in the Journal (Options.Journal), recorded before
// the kernel changes, so a process restarted after kill -9 adopts it too.
type Ownership struct {
	// BoundAddrs are the addresses on kube-ipvs0 (as dumped before this
	// sync's unbinds) and those about to be bound.
	BoundAddrs []netip.Addr
	// NodeAddrs are the node's own addresses that NodePorts listen on.
	NodeAddrs []netip.Addr
}

type ownershipRecord struct {
	addrs map[netip.Addr]bool
	keys  map[Key]bool
}

func (o ownershipRecord) owns(k Key) bool { return o.keys[k] || o.addrs[k.Address] }

// loadJournal reads Options.Journal once. An unreadable journal is logged
// and treated as empty: the proxy keeps serving, and adopts by the kernel
// rule alone.
func (r *Reconciler) loadJournal() {
	if r.journalReady {
		return
	}
	r.journalReady, r.journalSaved = true, true
	if r.opts.Journal == nil {
		return
	}
	addrs, keys, err := r.opts.Journal.Load()
	if err != nil {
		r.log.Warn("ownership journal unreadable: adopting by the kernel rule alone", zap.Error(err))
		r.journalSaved = false
		return
	}
	for _, a := range addrs {
		r.journal.addrs[a] = true
	}
	for _, k := range keys {
		r.journal.keys[k] = true
	}
	if len(addrs)+len(keys) > 0 {
		r.log.Info("ownership journal loaded", zap.Int("addresses", len(addrs)), zap.Int("virtualServers", len(keys)))
	}
}

// Coverage is what kernel state shows to be the proxy's at one moment: the
// addresses bound on kube-ipvs0 and the node's addresses (NodePort-range
// ports on them). The journal keeps what it does not cover.
type Coverage struct {
	// Bound reports whether an address is bound on kube-ipvs0 (for Record:
	// bound now and staying bound through the sync). nil: none is.
	Bound func(netip.Addr) bool
	// NodeAddrs are the node's own addresses.
	NodeAddrs []netip.Addr
}

// covers is the kernel-state rule of Ownership for one key.
func (r *Reconciler) covers(c Coverage, k Key) bool {
	if c.Bound != nil && c.Bound(k.Address) {
		return true
	}
	return r.opts.NodePortRange.Contains(k.Port) && slices.Contains(c.NodeAddrs, k.Address)
}

// Coverage is the ownership rule's kernel-state part as a Coverage. Its
// set of bound addresses is built at the first question: a full sync
// that finds the kernel as its mirror has it asks none. Not safe for
// concurrent use.
func (o Ownership) Coverage() Coverage {
	var bound map[netip.Addr]bool
	return Coverage{Bound: func(a netip.Addr) bool {
		if bound == nil {
			bound = addrSet(o.BoundAddrs)
		}
		return bound[a]
	}, NodeAddrs: o.NodeAddrs}
}

func addrSet(addrs []netip.Addr) map[netip.Addr]bool {
	m := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		m[a] = true
	}
	return m
}

// Record journals, before a sync changes anything, what the kernel will
// not show to be ours while the sync runs: the virtual servers of desired
// (a partial sync passes its changed services' share only) that during
// does not cover, and the addresses in leaving, about to be unbound. It writes
// the journal only when something new was added; the error is the
// journal's, and the sync may go on without it. Cost: one pass over the
// desired virtual servers, as Partial itself.
func (r *Reconciler) Record(desired []VirtualServer, during Coverage, leaving []netip.Addr) error {
	r.loadJournal()
	added := false
	for i := range desired {
		vs := &desired[i]
		// Coverage first: nearly every desired virtual server is on an
		// address the sync keeps bound, one lookup.
		if r.covers(during, vs.Key) || r.journal.owns(vs.Key) || r.excluded(vs.Address) {
			continue
		}
		r.journal.keys[vs.Key] = true
		added = true
	}
	for _, a := range leaving {
		if !r.journal.addrs[a] && !r.excluded(a) {
			r.journal.addrs[a] = true
			added = true
		}
	}
	if !added && r.journalSaved {
		return nil
	}
	return r.saveJournal()
}

// Settle prunes the journal after a sync to the owned (mirrored) virtual
// servers that after does not cover, and writes it if that changed
// anything. It looks only at the journal's entries, the virtual servers
// this sync created, adopted or deleted, and those on journaled addresses
// (the whole mirror after a Full), so a partial sync pays for what it
// changed.
func (r *Reconciler) Settle(after Coverage) error {
	r.loadJournal()
	// Not sized by the journal: after a first sync that journaled every
	// virtual server before its bind (one key per service), the few kept
	// would hold a table for all of them until the next change of the
	// journal.
	next := make(map[Key]bool)
	// mirrored keeps k, an owned virtual server, unless after covers it;
	// keep first checks that k is owned.
	mirrored := func(k Key) {
		if !r.covers(after, k) {
			next[k] = true
		}
	}
	keep := func(k Key) {
		if r.mirror[k] != nil {
			mirrored(k)
		}
	}
	switch {
	case r.settleAll:
		for k := range r.mirror {
			mirrored(k)
		}
	default:
		for k := range r.touched {
			keep(k)
		}
		if len(r.journal.addrs) > 0 {
			// An address entry is pruned: the virtual servers on it
			// that stay uncovered are kept as keys.
			for k := range r.mirror {
				if r.journal.addrs[k.Address] {
					keep(k)
				}
			}
		}
	}
	r.touched, r.settleAll = make(map[Key]bool), false
	for k := range r.journal.keys {
		keep(k)
	}
	if r.journalSaved && len(r.journal.addrs) == 0 && maps.Equal(next, r.journal.keys) {
		return nil
	}
	r.journal = ownershipRecord{addrs: map[netip.Addr]bool{}, keys: next}
	return r.saveJournal()
}

func (r *Reconciler) saveJournal() error {
	if r.opts.Journal == nil {
		r.journalSaved = true
		return nil
	}
	addrs := slices.Collect(maps.Keys(r.journal.addrs))
	keys := slices.Collect(maps.Keys(r.journal.keys))
	if err := r.opts.Journal.Save(addrs, keys); err != nil {
		r.journalSaved = false
		return err
	}
	r.journalSaved = true
	return nil
}
