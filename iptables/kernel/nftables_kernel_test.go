//go:build kernel

package kernel

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestNFTablesKernel: in a node's namespace, the tables a batch adds are
// listed as `nft list tables` names them; deleting kube-proxy's two tables
// leaves every other one (an inet table of the same name, another ip
// table); a batch naming a table that does not exist fails whole, naming
// it, and deletes nothing.
func TestNFTablesKernel(t *testing.T) {
	node := ktest.NewNode(t)
	keep := []iptables.NFTable{{Family: "inet", Name: "kube-proxy"}, {Family: "ip", Name: "firewall"}}
	err := node.NS.Do(func() error {
		n, err := OpenNFTables()
		if err != nil {
			return err
		}
		defer n.Close()
		if err := n.transact(unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, append(slices.Clone(iptables.KubeProxyNFTables), keep...)); err != nil {
			return err
		}
		got, err := n.Tables()
		if err != nil {
			return err
		}
		for _, want := range append(slices.Clone(iptables.KubeProxyNFTables), keep...) {
			if !slices.Contains(got, want) {
				t.Errorf("%s not listed: %v", want, got)
			}
		}
		if err := n.DeleteTables(iptables.KubeProxyNFTables); err != nil {
			return err
		}
		if got, err = n.Tables(); err != nil {
			return err
		}
		slices.SortFunc(got, compareTables)
		slices.SortFunc(keep, compareTables)
		if !slices.Equal(got, keep) {
			t.Errorf("tables after deleting kube-proxy's: %v; want %v", got, keep)
		}
		err = n.DeleteTables([]iptables.NFTable{{Family: "ip", Name: "firewall"}, {Family: "ip6", Name: "kube-proxy"}})
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("deleting a table that does not exist: %v; want ENOENT", err)
		}
		if got, _ = n.Tables(); !slices.Contains(got, iptables.NFTable{Family: "ip", Name: "firewall"}) {
			t.Errorf("a failed batch deleted ip firewall: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func compareTables(a, b iptables.NFTable) int {
	return cmp.Or(strings.Compare(a.Family, b.Family), strings.Compare(a.Name, b.Name))
}
