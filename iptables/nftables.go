package iptables

import (
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// What kube-proxy's nftables mode (pkg/proxy/nftables, 1.34) leaves: one
// table per IP family, `table ip kube-proxy` and `table ip6 kube-proxy`,
// holding all of its rules; nothing in iptables. Its DNAT runs in
// prerouting and output at dstnat priority, beside iptables' nat chains,
// so it serves ClusterIPs until the table goes whatever the proxy writes
// in iptables. The takeover is therefore the same as from iptables mode:
// a full sync writes the proxy's own state, binds the VIPs, and only then
// FinishTakeover deletes these two tables by name, in one transaction.
// Other tables (a firewall's, iptables-nft's own) are never touched.

// NFTable is one nftables table: its family (ip, ip6, inet, arp,
// bridge, netdev) and its name.
type NFTable struct{ Family, Name string }

func (t NFTable) String() string { return "table " + t.Family + " " + t.Name }

// KubeProxyNFTables are the tables of kube-proxy's nftables mode.
var KubeProxyNFTables = []NFTable{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}}

// NFTablesKernel lists and deletes nftables tables: iptables/kernel.NFTables
// over netlink (no `nft` binary), a fake in unit tests.
type NFTablesKernel interface {
	// Tables lists every table of the namespace.
	Tables() ([]NFTable, error)
	// DeleteTables deletes tables, with everything in them, in one
	// transaction: all or none.
	DeleteTables([]NFTable) error
}

// kubeProxyNFTablesIn are the tables of kube-proxy's nftables mode among
// tables.
func kubeProxyNFTablesIn(tables []NFTable) []NFTable {
	return slices.DeleteFunc(slices.Clone(tables), func(t NFTable) bool { return !slices.Contains(KubeProxyNFTables, t) })
}

// finishNFTables deletes kube-proxy's nftables tables, once per Syncer:
// after the first FinishTakeover that found none or deleted them, it costs
// nothing. A namespace whose tables cannot be listed (a kernel without
// nf_tables) has none.
func (a *Syncer) finishNFTables() error {
	if a.NFT == nil || a.nftDone {
		return nil
	}
	all, err := a.NFT.Tables()
	if err != nil {
		a.log.Debug("nftables tables not listed; no kube-proxy nftables mode to take over", zap.Error(err))
		a.nftDone = true
		return nil
	}
	found := kubeProxyNFTablesIn(all)
	if len(found) > 0 {
		if err := a.NFT.DeleteTables(found); err != nil {
			return fmt.Errorf("delete kube-proxy's nftables tables %v: %w", found, err)
		}
		a.log.Info("removed kube-proxy's nftables tables after binding the VIPs: IPVS serves the node", zap.Stringers("tables", found))
	}
	a.nftDone = true
	return nil
}
