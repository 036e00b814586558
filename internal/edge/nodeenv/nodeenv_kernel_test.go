//go:build kernel

package nodeenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelRead reads a node namespace as `run` and `recover` do — a
// route handle with strict checking on (NewHandle) — and checks what the
// planner gets: the default gateways of both families from the main table
// (the local table, with a route for each kube-ipvs0 address, is not asked
// for), the next hops of its other routes (multipath too), the node's own
// addresses with their prefixes (a /31 among them) without kube-ipvs0's
// and without link-local ones.
func TestKernelRead(t *testing.T) {
	node := ktest.NewNode(t)
	node.AddClient(t, "cli") // the LAN: NodeIPv4/24 and NodeIPv6/64 on eth0
	node.Run(t, "ip", "route", "add", "default", "via", "198.51.100.254")
	node.Run(t, "ip", "-6", "route", "add", "default", "via", "2001:db8:100::fe", "dev", "eth0")
	// A route that is not a default one (a ToR's other prefix), one with
	// two next hops, and a /31 point-to-point link.
	node.Run(t, "ip", "route", "add", "10.1.0.0/16", "via", "198.51.100.253")
	node.Run(t, "ip", "route", "add", "10.2.0.0/16", "nexthop", "via", "198.51.100.252", "nexthop", "via", "198.51.100.251")
	node.Run(t, "ip", "-6", "route", "add", "fd00:1::/64", "via", "2001:db8:100::fd", "dev", "eth0")
	node.Run(t, "ip", "link", "add", "p2p0", "type", "dummy")
	node.Run(t, "ip", "link", "set", "p2p0", "up")
	node.Run(t, "ip", "addr", "add", "192.0.2.0/31", "dev", "p2p0")
	node.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	for _, a := range []string{"10.96.0.1/32", "10.96.0.2/32", "fd00:96::1/128"} {
		node.Run(t, "ip", "addr", "add", a, "dev", "kube-ipvs0")
	}
	var env Env
	err := node.Do(func() error {
		h, err := NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		if !h.Strict {
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
	wantHops := []netip.Addr{netip.MustParseAddr("198.51.100.251"), netip.MustParseAddr("198.51.100.252"),
		netip.MustParseAddr("198.51.100.253"), netip.MustParseAddr("2001:db8:100::fd")}
	if !slices.Equal(env.NextHops, wantHops) {
		t.Errorf("next hops %v, want %v", env.NextHops, wantHops)
	}
	if !slices.Contains(env.LocalPrefixes, netip.MustParsePrefix("192.0.2.0/31")) {
		t.Errorf("local prefixes %v lack the /31 (the guard protects its other end from them)", env.LocalPrefixes)
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
	t.Logf("local addresses %v, gateways %v, next hops %v", env.LocalAddrs, env.Gateways, env.NextHops)
}

// TestKernelReadListeners reads the sockets a node namespace serves on, as
// `run` does on full syncs: a TCP listener on every address, a UDP socket
// on one, an SCTP endpoint; not a connected UDP socket, nor the sockets of
// another namespace (issue 14, item 6).
func TestKernelReadListeners(t *testing.T) {
	node := ktest.NewNode(t)
	node.AddClient(t, "cli")                         // eth0: 198.51.100.1/24
	outside, err := net.Listen("tcp", "127.0.0.1:0") // the VM's own namespace
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	var got []model.Listener
	err = node.Do(func() error {
		tl, err := net.Listen("tcp4", "0.0.0.0:2222")
		if err != nil {
			return err
		}
		defer tl.Close()
		ul, err := net.ListenPacket("udp", "198.51.100.1:5353")
		if err != nil {
			return err
		}
		defer ul.Close()
		uc, err := net.Dial("udp", "198.51.100.1:5353") // connected: no server
		if err != nil {
			return err
		}
		defer uc.Close()
		sl, err := sctpListen(38680)
		if err != nil {
			return err
		}
		defer unix.Close(sl)
		got, err = ReadListeners()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, l := range got {
		s = append(s, l.String())
	}
	t.Logf("listeners: %v", s)
	for _, want := range []string{"tcp 0.0.0.0:2222", "udp 198.51.100.1:5353", "sctp [::]:38680"} {
		if !slices.Contains(s, want) {
			t.Errorf("listeners %v lack %s", s, want)
		}
	}
	for _, l := range got {
		if l.Protocol == model.UDP && l.Addr != netip.MustParseAddr("198.51.100.1") || l.Port == uint16(outside.Addr().(*net.TCPAddr).Port) {
			t.Errorf("listener %s is not the node's", l)
		}
	}
}

// sctpListen opens a listening SCTP socket on [::]:port (dual-stack).
func sctpListen(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_SCTP)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: port}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// TestKernelRouteWatch follows a node namespace's routes as `run` does
// (Cache.WatchRoutes): while nothing changes, reads that are not full do
// not dump the routes again, nor after kube-ipvs0 gains addresses (routes
// of the local table); a new default gateway in the main table is seen by
// the next read once the watch reported it.
func TestKernelRouteWatch(t *testing.T) {
	node := ktest.NewNode(t)
	node.AddClient(t, "cli")
	node.Run(t, "ip", "route", "add", "default", "via", "198.51.100.254")
	node.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c *Cache
	var dumps atomic.Int32
	err := node.Do(func() error {
		h, err := NewHandle()
		if err != nil {
			return err
		}
		t.Cleanup(h.Close)
		c = NewCache(h)
		read := c.readRoutes
		c.readRoutes = func() ([]netip.Addr, []netip.Addr, error) {
			dumps.Add(1)
			return read()
		}
		return c.WatchRoutes(ctx, zaptest.NewLogger(t))
	})
	if err != nil {
		t.Fatal(err)
	}
	gateways := func() []netip.Addr {
		t.Helper()
		var env Env
		if err := node.Do(func() error {
			var err error
			env, err = c.Read(false)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return env.Gateways
	}
	first := netip.MustParseAddr("198.51.100.254")
	for range 3 {
		if g := gateways(); !slices.Equal(g, []netip.Addr{first}) {
			t.Fatalf("gateways %v, want %s", g, first)
		}
	}
	if n := dumps.Load(); n != 1 {
		t.Fatalf("%d route dumps for 3 reads with nothing changed, want 1", n)
	}
	for i := 1; i <= 50; i++ {
		node.Run(t, "ip", "addr", "add", fmt.Sprintf("10.96.0.%d/32", i), "dev", "kube-ipvs0")
	}
	node.Run(t, "ip", "route", "replace", "default", "via", "198.51.100.253")
	next := netip.MustParseAddr("198.51.100.253")
	deadline := time.Now().Add(30 * time.Second)
	for g := gateways(); !slices.Equal(g, []netip.Addr{next}); g = gateways() {
		if time.Now().After(deadline) {
			t.Fatalf("gateways still %v 30 s after the default route moved to %s: the watch did not report it", g, next)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The subscription delivers in order: the 50 local-table routes of
	// kube-ipvs0's addresses came before the main table's, so they were
	// read and dropped. RoutesChanged counted the watch's start and the
	// replace (one event; two would be a delete and an add).
	c.mu.Lock()
	gen := c.routeGen
	c.mu.Unlock()
	if gen > 3 {
		t.Errorf("RoutesChanged called %d times: the local table's events were taken for changes of the main table", gen)
	}
	n := dumps.Load()
	if g := gateways(); !slices.Equal(g, []netip.Addr{next}) || dumps.Load() != n {
		t.Errorf("a read after the change: gateways %v, %d route dumps after %d: want %s from the cache", g, dumps.Load(), n, next)
	}
	t.Logf("%d route dumps, RoutesChanged %d times", n, gen)
}
