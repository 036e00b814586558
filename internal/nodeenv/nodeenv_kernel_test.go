//go:build kernel

package nodeenv

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/ktest"
)

// TestKernelRead reads a node namespace as `run` and `recover` do — a
// route handle with strict checking on (NewHandle) — and checks what the
// planner gets: the default gateways of both families from the main table
// (the local table, with a route for each kube-ipvs0 address, is not asked
// for), the node's own addresses without kube-ipvs0's and without
// link-local ones.
func TestKernelRead(t *testing.T) {
	node := ktest.NewNode(t)
	node.AddClient(t, "cli") // the LAN: NodeIPv4/24 and NodeIPv6/64 on eth0
	node.Run(t, "ip", "route", "add", "default", "via", "198.51.100.254")
	node.Run(t, "ip", "-6", "route", "add", "default", "via", "2001:db8:100::fe", "dev", "eth0")
	node.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	for _, a := range []string{"10.96.0.1/32", "10.96.0.2/32", "fd00:96::1/128"} {
		node.Run(t, "ip", "addr", "add", a, "dev", "kube-ipvs0")
	}
	var env Env
	err := node.Do(func() error {
		h, strict, err := NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		if !strict {
			return errors.New("no strict checking: the kernel dumps every table")
		}
		env, err = Read(h)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wantGW := []netip.Addr{netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr("2001:db8:100::fe")}
	if !slices.Equal(env.Gateways, wantGW) {
		t.Errorf("gateways %v, want %v", env.Gateways, wantGW)
	}
	for _, a := range []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6} {
		if !slices.Contains(env.LocalAddrs, a) {
			t.Errorf("local addresses %v lack %s", env.LocalAddrs, a)
		}
	}
	for _, a := range env.LocalAddrs {
		if a.IsLinkLocalUnicast() || a == netip.MustParseAddr("10.96.0.1") || a == netip.MustParseAddr("fd00:96::1") {
			t.Errorf("local addresses %v hold %s", env.LocalAddrs, a)
		}
	}
	t.Logf("local addresses %v, gateways %v", env.LocalAddrs, env.Gateways)
}
