//go:build kernel

package nlconn

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelDumpMatchesNetlink dumps a node namespace's addresses as `run`
// does and checks them against netlink.Handle.AddrList of the same
// namespace: every link's (both families, a /31, a point-to-point address
// with a peer, IPv6 link-local ones), kube-ipvs0's alone with strict
// checking (the kernel's filter), and every link's but kube-ipvs0's. The
// 2,000 kube-ipvs0 addresses take many receive buffers of the dump.
func TestKernelDumpMatchesNetlink(t *testing.T) {
	node := ktest.NewNode(t)
	node.AddClient(t, "cli") // eth0: an IPv4 /24, an IPv6 /64, fe80::
	var batch strings.Builder
	batch.WriteString("link add p2p0 type dummy\nlink set p2p0 up\naddr add 192.0.2.0/31 dev p2p0\n" +
		"addr add 192.0.2.10 peer 192.0.2.11 dev p2p0\nlink add kube-ipvs0 type dummy\n")
	for i := range 1000 {
		fmt.Fprintf(&batch, "addr add 10.96.%d.%d/32 dev kube-ipvs0\n", i/250, i%250+1)
		fmt.Fprintf(&batch, "addr add fd00:96::%x/128 dev kube-ipvs0 nodad noprefixroute\n", i+1)
	}
	node.RunInput(t, batch.String(), "ip", "-batch", "-")

	var all, only, except, libAll []Addr
	var ipvs0 int
	err := node.Do(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		l, err := h.LinkByName("kube-ipvs0")
		if err != nil {
			return err
		}
		ipvs0 = l.Attrs().Index
		d, err := OpenAddrDumper()
		if err != nil {
			return err
		}
		defer d.Close()
		if !d.Strict {
			return fmt.Errorf("no strict checking: the kernel would send every link's addresses")
		}
		for _, q := range []struct {
			f   AddrFilter
			dst *[]Addr
		}{{AddrFilter{}, &all}, {AddrFilter{Link: ipvs0}, &only}, {AddrFilter{Except: ipvs0}, &except}} {
			if err := d.Dump(q.f, func(a Addr) { *q.dst = append(*q.dst, a) }); err != nil {
				return err
			}
		}
		as, err := h.AddrList(nil, netlink.FAMILY_ALL)
		for _, a := range as {
			ip, _ := netip.AddrFromSlice(a.IP)
			ones, _ := a.Mask.Size()
			libAll = append(libAll, Addr{a.LinkIndex, netip.PrefixFrom(ip.Unmap(), ones)})
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cmp := func(a, b Addr) int {
		if a.LinkIndex != b.LinkIndex {
			return a.LinkIndex - b.LinkIndex
		}
		return a.Prefix.Addr().Compare(b.Prefix.Addr())
	}
	for _, s := range [][]Addr{all, only, except, libAll} {
		slices.SortFunc(s, cmp)
	}
	if !slices.Equal(all, libAll) {
		t.Fatalf("dump of every link (%d) differs from netlink's (%d):\n%v\n%v", len(all), len(libAll), all, libAll)
	}
	onKube := func(a Addr) bool { return a.LinkIndex == ipvs0 }
	if want := slices.DeleteFunc(slices.Clone(all), func(a Addr) bool { return !onKube(a) }); len(want) != 2000 || !slices.Equal(only, want) {
		t.Errorf("kube-ipvs0 alone: %d addresses, want its 2,000", len(only))
	}
	if want := slices.DeleteFunc(slices.Clone(all), onKube); !slices.Equal(except, want) {
		t.Errorf("without kube-ipvs0: %v, want %v", except, want)
	}
	for _, p := range []string{"192.0.2.0/31", "192.0.2.10/32"} {
		if !slices.ContainsFunc(except, func(a Addr) bool { return a.Prefix == netip.MustParsePrefix(p) }) {
			t.Errorf("without kube-ipvs0: %s missing from %v", p, except)
		}
	}
}
