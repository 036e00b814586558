//go:build kernel

package nlconn

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelSubscribe follows a node namespace's addresses while `ip`
// adds and removes some on a dummy link: each is one AddrUpdate with its
// link, its prefix (IPv4 and IPv6) and whether it was added, in order.
func TestKernelSubscribeAddrs(t *testing.T) {
	node := ktest.NewNode(t)
	node.Run(t, "ip", "link", "add", "watch0", "type", "dummy")
	node.Run(t, "ip", "link", "set", "watch0", "up")
	var index int
	sub := func() *Sub[AddrUpdate] {
		var s *Sub[AddrUpdate]
		if err := node.Do(func() error {
			h, err := netlink.NewHandle()
			if err != nil {
				return err
			}
			defer h.Close()
			l, err := h.LinkByName("watch0")
			if err != nil {
				return err
			}
			index = l.Attrs().Index
			ns, err := netns.Get()
			if err != nil {
				return err
			}
			defer ns.Close()
			s, err = SubscribeAddrs(ns, 0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return s
	}()
	defer close(sub.Done)
	node.Run(t, "ip", "addr", "add", "10.96.0.10/32", "dev", "watch0")
	node.Run(t, "ip", "addr", "add", "fd00:96::a/128", "dev", "watch0", "nodad", "noprefixroute")
	node.Run(t, "ip", "addr", "del", "10.96.0.10/32", "dev", "watch0")
	want := []AddrUpdate{
		{Addr{index, netip.MustParsePrefix("10.96.0.10/32")}, true},
		{Addr{index, netip.MustParsePrefix("fd00:96::a/128")}, true},
		{Addr{index, netip.MustParsePrefix("10.96.0.10/32")}, false},
	}
	var got []AddrUpdate
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case u := <-sub.Updates:
			// The link's fe80:: address comes and goes on its own.
			if !u.Prefix.Addr().IsLinkLocalUnicast() {
				got = append(got, u)
			}
		case <-timeout:
			t.Fatalf("after 10 s: %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("updates %v, want %v", got, want)
	}
}
