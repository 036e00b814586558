//go:build kernel

package kernel

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelAddAddrsMatchesAddAddr: the batched binds make each address
// as AddAddr does through the netlink library (flags, scope, lifetimes,
// prefix length), both families, 600 of them in several sendmsgs; one
// already there is no error.
func TestKernelAddAddrsMatchesAddAddr(t *testing.T) {
	node := ktest.NewNode(t)
	ref4, ref6 := netip.MustParsePrefix("10.96.0.1/32"), netip.MustParsePrefix("fd00:96::1/128")
	batch := []netip.Prefix{ref4}
	for i := range 300 {
		batch = append(batch,
			netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 97, byte(i / 250), byte(i%250 + 1)}), 32),
			netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x97, 14: byte(i >> 8), 15: byte(i + 1)}), 128))
	}
	var addrs []netlink.Addr
	outcomes := 0
	err := node.Do(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		link, err := EnsureDevice(h)
		if err != nil {
			return err
		}
		w, err := nlconn.OpenWriter(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer w.Close()
		link.SetWriter(w)
		for _, p := range []netip.Prefix{ref4, ref6} {
			if err := link.AddAddr(p); err != nil {
				return err
			}
		}
		link.AddAddrs(batch, func(i int, err error) {
			if i != outcomes {
				t.Errorf("outcome %d came after %d", i, outcomes-1)
			}
			outcomes = i + 1
			if err != nil {
				t.Errorf("%s: %v", batch[i], err)
			}
		})
		addrs, err = h.AddrList(link.link, netlink.FAMILY_ALL)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if outcomes != len(batch) {
		t.Fatalf("%d outcomes for %d addresses", outcomes, len(batch))
	}
	byAddr := map[netip.Addr]netlink.Addr{}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		byAddr[ip.Unmap()] = a
	}
	same := func(a, ref netlink.Addr) bool {
		aBits, _ := a.Mask.Size()
		refBits, _ := ref.Mask.Size()
		return a.Flags == ref.Flags && a.Scope == ref.Scope && a.PreferedLft == ref.PreferedLft &&
			a.ValidLft == ref.ValidLft && aBits == refBits && a.Peer.String() == ref.Peer.String()
	}
	for _, p := range batch[1:] {
		ref := byAddr[ref6.Addr()]
		if p.Addr().Is4() {
			ref = byAddr[ref4.Addr()]
		}
		got, ok := byAddr[p.Addr()]
		if !ok {
			t.Errorf("%s is not on %s", p, addrmgr.Device)
		} else if !same(got, ref) {
			t.Errorf("%s: %s, AddAddr made %s", p, describe(got), describe(ref))
		}
	}
	if len(addrs) != len(batch)+1 {
		t.Errorf("%s holds %d addresses, want %d", addrmgr.Device, len(addrs), len(batch)+1)
	}
}

func describe(a netlink.Addr) string {
	return fmt.Sprintf("%s flags %#x scope %d preferred %d valid %d peer %v", a.IPNet, a.Flags, a.Scope, a.PreferedLft, a.ValidLft, a.Peer)
}
