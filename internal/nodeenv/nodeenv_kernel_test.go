//go:build kernel

package nodeenv

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
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
	var got []guard.Listener
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
