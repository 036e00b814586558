package iptables

import (
	"errors"
	"fmt"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"net/netip"
	"slices"

	"go.uber.org/zap"
)

// --strict-arp-vips: the node answers no ARP request for an address bound
// on kube-ipvs0, so that MetalLB or kube-vip in L2 mode alone answers for
// a LoadBalancer IP, without kube-proxy's strictARP, which sets
// arp_ignore=1 and arp_announce=2 on every interface and so changes how
// the node answers for its own addresses too. One nftables table of the
// arp family, owned by name, holds one chain on the arp input hook whose
// one rule drops requests for Ethernet and IPv4 whose target protocol
// address is in a set of the VIPs:
//
//	table arp ipvs-proxy {
//		set vips { type ipv4_addr; elements = { 10.96.0.1, 192.0.2.10 } }
//		chain vips-in {
//			type filter hook input priority filter; policy accept;
//			arp htype 1 arp ptype ip arp hlen 6 arp plen 4 arp operation request \
//				arp daddr ip @vips drop comment "..."
//		}
//	}
//
// A change of the VIPs adds and deletes set elements; a full sync reads
// the table back and rebuilds it whole, in one transaction, when anything
// but the elements differs. ARP is IPv4's: IPv6 VIPs are not in the set.

// ARPTable is the table of --strict-arp-vips; ARPChain its chain, ARPSet
// its set and ARPRuleComment its rule's comment, by which a full sync
// knows the rule as its own.
var ARPTable = NFTable{Family: "arp", Name: "ipvs-proxy"}

const (
	ARPChain       = "vips-in"
	ARPSet         = "vips"
	ARPRuleComment = "ipvs-proxy: no ARP answer for kube-ipvs0 addresses"
)

// ARPState is what the kernel holds of ARPTable.
type ARPState struct {
	// Present says the table exists; the rest is empty without it.
	Present bool
	Chains  []ARPChainState
	// Sets are the table's sets by name; Rules the comment of each rule,
	// by chain ("chain: comment").
	Sets  []string
	Rules []string
	// VIPs are ARPSet's elements.
	VIPs []netip.Addr
}

// ARPChainState is one chain of ARPTable: Base when it is on a hook,
// AcceptPolicy when its policy is accept.
type ARPChainState struct {
	Name               string
	Base, AcceptPolicy bool
}

// ARPKernel reads and writes ARPTable: iptables/kernel.NFTables over
// netlink, a fake in unit tests.
type ARPKernel interface {
	// ReadARP reads the table.
	ReadARP() (ARPState, error)
	// BuildARP creates the table whole, with vips in its set, deleting it
	// first in the same transaction when replace is set.
	BuildARP(replace bool, vips []netip.Addr) error
	// UpdateARP adds and deletes elements of the table's set.
	UpdateARP(add, del []netip.Addr) error
	// DeleteTables deletes tables in one transaction.
	DeleteTables([]NFTable) error
}

// ErrNoARPKernel: --strict-arp-vips on a node whose kernel has no
// nftables netlink.
var ErrNoARPKernel = errors.New("no nftables netlink for table arp ipvs-proxy")

// ARPVIPs are the addresses of kube-ipvs0 (planner.State.Addresses) the
// node must not answer ARP for: the IPv4 ones.
func ARPVIPs(addrs []netip.Prefix) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, p := range addrs {
		if a := p.Addr(); a.Is4() && p.IsSingleIP() {
			out = append(out, a)
		}
	}
	return out
}

// intact says the table holds what BuildARP makes, its set's elements
// aside.
func (s ARPState) intact() bool {
	return s.Present && slices.Equal(s.Chains, []ARPChainState{{Name: ARPChain, Base: true, AcceptPolicy: true}}) &&
		slices.Equal(s.Sets, []string{ARPSet}) && slices.Equal(s.Rules, []string{ARPChain + ": " + ARPRuleComment})
}

// arpDiff is what turns the elements have into want.
func arpDiff(have map[netip.Addr]bool, want []netip.Addr) (add, del []netip.Addr) {
	seen := make(map[netip.Addr]bool, len(want))
	for _, a := range want {
		seen[a] = true
		if !have[a] {
			add = append(add, a)
		}
	}
	for a := range have {
		if !seen[a] {
			del = append(del, a)
		}
	}
	slices.SortFunc(del, netip.Addr.Compare)
	return add, del
}

// arpMirror is what the Syncer last wrote of ARPTable.
type arpMirror struct {
	// vips are the set's elements; nil until a full sync read the table
	// (or after a failed write): the next sync then reads it.
	vips map[netip.Addr]bool
	// gone says a sync without --strict-arp-vips found the table absent
	// or deleted it.
	gone bool
}

// SyncARP makes ARPTable hold the ARPVIPs of addrs, kube-ipvs0's planned
// addresses, when the Syncer's ARPVIPs is set, and removes it when not. A full sync reads the table and
// repairs what others changed: elements one by one, anything else by
// rebuilding the table in one transaction. A partial one writes only the
// elements that differ from what it last wrote, reading nothing.
//
// The drift it returns (DriftARPTable) is also the Syncer's until the
// next Full.
func (a *Syncer) SyncARP(addrs []netip.Prefix, full bool) (layer.Drift, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var drift layer.Drift
	err := a.syncARP(addrs, full, &drift)
	a.drift.Merge(drift)
	return drift, err
}

func (a *Syncer) syncARP(addrs []netip.Prefix, full bool, drift *layer.Drift) error {
	k, _ := a.NFT.(ARPKernel)
	if !a.ARPVIPs {
		if a.arp.gone || k == nil || !full {
			return nil
		}
		return a.dropARP(k)
	}
	if k == nil {
		return fmt.Errorf("--strict-arp-vips: %w", ErrNoARPKernel)
	}
	a.arp.gone = false
	vips := ARPVIPs(addrs)
	if !full && a.arp.vips != nil {
		add, del := arpDiff(a.arp.vips, vips)
		return a.writeARP(k, add, del)
	}
	st, err := k.ReadARP()
	if err != nil {
		a.arp.vips = nil
		return fmt.Errorf("read %s: %w", ARPTable, err)
	}
	if !st.intact() {
		if st.Present {
			drift.Add(DriftARPTable, 1)
			a.log.Info("rebuilding the nftables table changed outside the proxy", zap.Stringer("table", ARPTable))
		}
		a.arp.vips = nil
		if err := k.BuildARP(st.Present, vips); err != nil {
			return fmt.Errorf("create %s: %w", ARPTable, err)
		}
		a.arp.vips = asSet(vips)
		return nil
	}
	have := asSet(st.VIPs)
	add, del := arpDiff(have, vips)
	if full && a.arp.vips != nil {
		// Against what the proxy wrote, what differs now was changed by others.
		n := 0
		for v := range have {
			if !a.arp.vips[v] {
				n++
			}
		}
		for v := range a.arp.vips {
			if !have[v] {
				n++
			}
		}
		if n > 0 {
			drift.Add(DriftARPTable, n)
			a.log.Info("repairing the VIP set of the nftables table changed outside the proxy", zap.Stringer("table", ARPTable), zap.Int("elements", n))
		}
	}
	a.arp.vips = have
	return a.writeARP(k, add, del)
}

func (a *Syncer) writeARP(k ARPKernel, add, del []netip.Addr) error {
	if len(add)+len(del) == 0 {
		return nil
	}
	if err := k.UpdateARP(add, del); err != nil {
		a.arp.vips = nil
		return fmt.Errorf("update set %s of %s: %w", ARPSet, ARPTable, err)
	}
	for _, v := range del {
		delete(a.arp.vips, v)
	}
	for _, v := range add {
		a.arp.vips[v] = true
	}
	return nil
}

// dropARP deletes ARPTable if it is there: a node whose proxy ran with
// --strict-arp-vips and now runs without it answers ARP for the VIPs again.
func (a *Syncer) dropARP(k ARPKernel) error {
	a.arp.vips = nil
	st, err := k.ReadARP()
	if err != nil {
		return fmt.Errorf("read %s: %w", ARPTable, err)
	}
	if st.Present {
		if err := k.DeleteTables([]NFTable{ARPTable}); err != nil {
			return fmt.Errorf("delete %s: %w", ARPTable, err)
		}
		a.log.Info("removed the nftables table of --strict-arp-vips, which is off", zap.Stringer("table", ARPTable))
	}
	a.arp.gone = true
	return nil
}

// CleanupARP removes ARPTable, if there (`ipvs-proxy --cleanup`).
func (a *Syncer) CleanupARP() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.NFT.(ARPKernel)
	if !ok {
		return nil
	}
	return a.dropARP(k)
}

func asSet(vips []netip.Addr) map[netip.Addr]bool {
	m := make(map[netip.Addr]bool, len(vips))
	for _, v := range vips {
		m[v] = true
	}
	return m
}
