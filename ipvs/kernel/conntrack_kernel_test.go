//go:build kernel

package kernel

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelDeleteFlows: DeleteFlows deletes exactly the flows of one
// virtual server that reply from the removed endpoint, and returns the
// kernel's count of them (kubeproxy_conntrack_reconciler_deleted_entries_total):
// two flows of 10.96.0.10:53 from 10.244.0.5 go; the same VIP's flow from
// another endpoint and another VIP's flow from the same endpoint stay.
func TestKernelDeleteFlows(t *testing.T) {
	node := ktest.NewNode(t)
	insert := func(vip, endpoint string, sport int) {
		node.Run(t, "conntrack", "-I", "-p", "udp", "-s", "198.51.100.1", "-d", vip, "--sport", fmt.Sprint(sport), "--dport", "53",
			"-r", endpoint, "-q", "198.51.100.1", "--reply-port-src", "53", "--reply-port-dst", fmt.Sprint(sport), "-t", "300")
	}
	insert("10.96.0.10", "10.244.0.5", 40000)
	insert("10.96.0.10", "10.244.0.5", 40001)
	insert("10.96.0.10", "10.244.0.6", 40002)
	insert("10.96.0.11", "10.244.0.5", 40003)
	var n int
	err := node.Do(func() error {
		c, err := OpenConntrack()
		if err != nil {
			return err
		}
		defer c.Close()
		n, err = c.DeleteFlows(model.UDP, netip.MustParseAddr("10.96.0.10"), 53, netip.MustParseAddr("10.244.0.5"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("DeleteFlows deleted %d flows, want 2", n)
	}
	left := node.Run(t, "conntrack", "-L", "-p", "udp")
	for _, want := range []string{"sport=40002", "sport=40003"} {
		if !strings.Contains(left, want) {
			t.Errorf("flow %s deleted too:\n%s", want, left)
		}
	}
	for _, gone := range []string{"sport=40000 ", "sport=40001 "} {
		if strings.Contains(left, gone) {
			t.Errorf("flow %s left:\n%s", gone, left)
		}
	}
}
