//go:build kernel

package kernel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestStrictARPVIPsKernel: a LAN peer asks the node by ARP (a raw request
// from a packet socket, as arping sends it) for addresses bound on
// kube-ipvs0. Before the table the node answers for them (the bed can show
// a failure); once a full sync made table arp ipvs-proxy, it answers for
// no VIP, the on-link LoadBalancer IP and the ClusterIP alike, and still
// for its own LAN address. A partial sync that drops a VIP from the plan
// makes the node answer for it again, one that adds a VIP stops the
// answers; an element someone deleted is put back by the next full sync
// (one drift); cleanup removes the table. No interface's arp_ignore or
// arp_announce changes on the way.
func TestStrictARPVIPsKernel(t *testing.T) {
	node := ktest.NewNode(t)
	peer := node.AddClient(t, "lan-peer")
	lbIP, clusterIP, newIP := "198.51.100.200", "10.96.0.10", "198.51.100.201"
	node.RunInput(t, fmt.Sprintf("link add kube-ipvs0 type dummy\n"+
		"addr add %s/32 dev kube-ipvs0\naddr add %s/32 dev kube-ipvs0\naddr add %s/32 dev kube-ipvs0\n"+
		"addr add fd00:96::10/128 dev kube-ipvs0 nodad noprefixroute\n", lbIP, clusterIP, newIP), "ip", "-batch", "-")
	before := arpSysctls(t, node.NS)

	ask := func(target string, want bool) {
		t.Helper()
		got, err := arpAnswered(peer.NS, peer.Addrs[0], netip.MustParseAddr(target))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("ARP request for %s from the LAN: answered %v, want %v\n%s", target, got, want, node.Run(t, "nft", "list", "table", "arp", "ipvs-proxy"))
		}
	}
	ask(lbIP, true)
	ask(ktest.NodeIPv4.String(), true)

	var sy *iptables.Syncer
	inNode := func(fn func() error) {
		t.Helper()
		if err := node.Do(fn); err != nil {
			t.Fatal(err)
		}
	}
	inNode(func() (err error) {
		if sy, err = NewSyncer(nil); err != nil {
			return err
		}
		sy.ARPVIPs = true
		_, err = sy.SyncARP(vips(lbIP, clusterIP, "fd00:96::10"), true)
		return err
	})
	t.Cleanup(sy.Close)
	if out := node.Run(t, "nft", "list", "table", "arp", "ipvs-proxy"); !strings.Contains(out, "@vips drop") || !strings.Contains(out, lbIP) {
		t.Errorf("nft list table arp ipvs-proxy:\n%s", out)
	}
	ask(lbIP, false)
	ask(clusterIP, false)
	ask(ktest.NodeIPv4.String(), true)

	inNode(func() error { _, err := sy.SyncARP(vips(clusterIP, newIP, "fd00:96::10"), false); return err })
	ask(lbIP, true)
	ask(newIP, false)

	inNode(func() error { return sy.NFT.(*NFTables).UpdateARP(nil, []netip.Addr{netip.MustParseAddr(clusterIP)}) })
	ask(clusterIP, true)
	var d layer.Drift
	inNode(func() (err error) { d, err = sy.SyncARP(vips(clusterIP, newIP, "fd00:96::10"), true); return err })
	if d[iptables.DriftARPTable] != 1 {
		t.Errorf("full sync after an element was deleted by others: drift %+v, want ARP 1", d)
	}
	ask(clusterIP, false)

	inNode(sy.CleanupARP)
	ask(newIP, true)
	if out := node.Run(t, "nft", "list", "tables", "arp"); strings.Contains(out, "ipvs-proxy") {
		t.Errorf("table left after cleanup: %s", out)
	}
	if after := arpSysctls(t, node.NS); after != before {
		t.Errorf("arp_ignore/arp_announce changed:\nbefore %s\nafter  %s", before, after)
	}
}

func vips(addrs ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out
}

// arpSysctls are arp_ignore and arp_announce of every interface of ns
// (and all, default), one line.
func arpSysctls(t *testing.T, ns *ktest.NS) string {
	t.Helper()
	var b strings.Builder
	err := ns.Do(func() error {
		dirs, err := filepath.Glob("/proc/sys/net/ipv4/conf/*")
		if err != nil {
			return err
		}
		for _, d := range dirs {
			for _, k := range []string{"arp_ignore", "arp_announce"} {
				v, err := os.ReadFile(filepath.Join(d, k))
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "%s/%s=%s ", filepath.Base(d), k, bytes.TrimSpace(v))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// arpAnswered sends from ns's eth0 one ARP request (from src) for target
// to the broadcast address, and says whether a reply from target arrives
// within two seconds (TCG is slow).
func arpAnswered(ns *ktest.NS, src, target netip.Addr) (bool, error) {
	var answered bool
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		proto := int(binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, unix.ETH_P_ARP)))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		defer unix.Close(fd)
		ll := &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index}
		if err := unix.Bind(fd, ll); err != nil {
			return err
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000}); err != nil {
			return err
		}
		req := append([]byte{0, 1, 8, 0, 6, 4, 0, 1}, ifi.HardwareAddr...)
		req = append(append(req, src.AsSlice()...), make([]byte, 6)...)
		req = append(req, target.AsSlice()...)
		to := &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		if err := unix.Sendto(fd, req, 0, to); err != nil {
			return fmt.Errorf("send ARP request: %w", err)
		}
		buf := make([]byte, 1500)
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue // the receive timeout: look at the clock again
			}
			// A reply (operation 2) whose sender protocol address is target.
			if n >= 28 && buf[7] == 2 && bytes.Equal(buf[14:18], target.AsSlice()) {
				answered = true
				return nil
			}
		}
		return nil
	})
	return answered, err
}
