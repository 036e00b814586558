package iptables_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// fakeNFT is a namespace's nftables tables, with the calls that changed
// them.
type fakeNFT struct {
	tables  []iptables.NFTable
	lists   int
	deletes [][]iptables.NFTable
	err     error
}

func (f *fakeNFT) Tables() ([]iptables.NFTable, error) {
	f.lists++
	return slices.Clone(f.tables), nil
}

func (f *fakeNFT) DeleteTables(ts []iptables.NFTable) error {
	if f.err != nil {
		return f.err
	}
	f.deletes = append(f.deletes, ts)
	f.tables = slices.DeleteFunc(f.tables, func(t iptables.NFTable) bool { return slices.Contains(ts, t) })
	return nil
}

// TestTakeoverFromNFTablesMode: kube-proxy's nftables tables serve until
// FinishTakeover, which the applier calls after binding the VIPs: a Full
// leaves them; FinishTakeover deletes `ip kube-proxy` and `ip6
// kube-proxy` in one transaction and no other table (a firewall's inet
// table, iptables-nft's ip nat, an inet table named kube-proxy); a failed
// delete is an error and is tried again; once done, it lists nothing more.
func TestTakeoverFromNFTablesMode(t *testing.T) {
	a, _ := newFakeSyncer(t)
	others := []iptables.NFTable{{"inet", "firewalld"}, {"ip", "nat"}, {"inet", "kube-proxy"}}
	nft := &fakeNFT{tables: append([]iptables.NFTable{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}}, others...)}
	a.NFT = nft
	sets, rules := kubeProxyPlan(t)
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if len(nft.deletes) != 0 {
		t.Fatalf("Full deleted nftables tables %v before the VIPs are bound", nft.deletes)
	}
	nft.err = errors.New("netlink: device or resource busy")
	if err := a.FinishTakeover(); !errors.Is(err, nft.err) {
		t.Fatalf("FinishTakeover with a failing delete: %v; want the error", err)
	}
	nft.err = nil
	if err := a.FinishTakeover(); err != nil {
		t.Fatal(err)
	}
	if want := [][]iptables.NFTable{{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}}}; !slices.EqualFunc(nft.deletes, want, slices.Equal) {
		t.Errorf("deleted %v; want %v in one transaction", nft.deletes, want)
	}
	if !slices.Equal(nft.tables, others) {
		t.Errorf("tables left %v; want %v", nft.tables, others)
	}
	lists := nft.lists
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if err := a.FinishTakeover(); err != nil || nft.lists != lists {
		t.Errorf("after the takeover, FinishTakeover listed the tables %d more times (%v); want none", nft.lists-lists, err)
	}
}
