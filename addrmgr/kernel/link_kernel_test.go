//go:build kernel

package kernel

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelReaderMatchesLink: the full sync's kube-ipvs0 read (a Reader
// on an address dumper) finds what the binding handle's dump finds, both
// families, and none of another link's addresses.
func TestKernelReaderMatchesLink(t *testing.T) {
	node := ktest.NewNode(t)
	node.AddClient(t, "cli")
	var batch strings.Builder
	batch.WriteString("link add kube-ipvs0 type dummy\n")
	for i := range 300 {
		fmt.Fprintf(&batch, "addr add 10.96.%d.%d/32 dev kube-ipvs0\n", i/250, i%250+1)
		fmt.Fprintf(&batch, "addr add fd00:96::%x/128 dev kube-ipvs0 nodad noprefixroute\n", i+1)
	}
	node.RunInput(t, batch.String(), "ip", "-batch", "-")
	var viaHandle, viaReader []netip.Prefix
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
		d, err := nlconn.OpenAddrDumper()
		if err != nil {
			return err
		}
		defer d.Close()
		if viaHandle, err = link.Addrs(); err != nil {
			return err
		}
		viaReader, err = link.Reader(d).Addrs()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cmp := func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) }
	slices.SortFunc(viaHandle, cmp)
	slices.SortFunc(viaReader, cmp)
	if len(viaReader) != 600 || !slices.Equal(viaReader, viaHandle) {
		t.Fatalf("the reader found %d addresses, the handle %d; want the same 600", len(viaReader), len(viaHandle))
	}
}
