package kernel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
)

// Link is kube-ipvs0 in the network namespace its netlink handle was
// opened in.
//
// Addresses are added as kube-proxy adds them — a host prefix with the
// default (global) scope, which puts the VIP in the local routing table so
// that IPVS sees packets to it as local — plus what kube-proxy does not set:
//
//   - IFA_F_NOPREFIXROUTE, so no /128 prefix route appears in the main table
//     for an IPv6 VIP (an IPv4 /32 never gets one);
//   - for IPv6, IFA_F_NODAD, so the address is usable at once instead of
//     tentative (a dummy device is NOARP, so the kernel skips DAD anyway);
//   - for IPv6, `preferred_lft 0` (deprecated, valid forever). Otherwise an
//     IPv6 VIP wins the kernel's source address selection (longest matching
//     prefix) for traffic to pods whose node-side veth has only a link-local
//     address, and masqueraded NodePort traffic reaches the backends from a
//     VIP instead of a node address (seen in the VM tests). A deprecated
//     address is never chosen as a source (RFC 6724 rule 3) but still
//     receives. IPv4 takes the outgoing interface's address and needs nothing.
//
// The device stays down, as kube-proxy leaves it: the local routes work
// without it being up, and a down device never answers ARP or NDP on its own.
type Link struct {
	h    *netlink.Handle
	link netlink.Link
	// dump, on a Reader, dumps the addresses instead of h.
	dump *nlconn.AddrDumper
	// batch, when set (SetWriter), sends AddAddrs's requests.
	batch *nlconn.Writer
	// OtherLinks, if set before Watch, hears from the watch about the
	// addresses of every other link (the node's own): it is called with
	// false whenever one was added or removed or the watch (re)started,
	// and with true when events may be lost until a later call with false.
	// A cache of the node's addresses reads them again after each call.
	// It is called from the watch's goroutine.
	OtherLinks func(lost bool)
}

var _ addrmgr.Link = (*Link)(nil)

// EnsureDevice finds kube-ipvs0 through h, creating it as a dummy device if
// it is missing (`ip link add kube-ipvs0 type dummy`); it never sets it up.
// A kube-ipvs0 that exists but is no dummy is an error.
func EnsureDevice(h *netlink.Handle) (*Link, error) {
	l, err := h.LinkByName(addrmgr.Device)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		d := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: addrmgr.Device}}
		if err := h.LinkAdd(d); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("ip link add %s type dummy: %w", addrmgr.Device, err)
		}
		if l, err = h.LinkByName(addrmgr.Device); err != nil {
			return nil, fmt.Errorf("ip link show %s: %w", addrmgr.Device, err)
		}
	case err != nil:
		return nil, fmt.Errorf("ip link show %s: %w", addrmgr.Device, err)
	}
	if l.Type() != "dummy" {
		return nil, fmt.Errorf("%w: type %s", addrmgr.ErrNotDummy, l.Type())
	}
	return &Link{h: h, link: l}, nil
}

// DeleteDevice removes kube-ipvs0 and every address on it
// (`ip link del kube-ipvs0`), for cleanup. A missing device is no error.
func DeleteDevice(h *netlink.Handle) error {
	l, err := h.LinkByName(addrmgr.Device)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ip link show %s: %w", addrmgr.Device, err)
	}
	if l.Type() != "dummy" {
		return fmt.Errorf("%w: type %s", addrmgr.ErrNotDummy, l.Type())
	}
	if err := h.LinkDel(l); err != nil {
		return fmt.Errorf("ip link del %s: %w", addrmgr.Device, err)
	}
	return nil
}

// Reader is the same device read through d, an address dumper of the
// same network namespace: Manager.SetReader's socket for the full sync's
// dump beside the sync. It only dumps (Addrs), and asks the kernel for
// kube-ipvs0's addresses alone, parsing each as it arrives.
func (k *Link) Reader(d *nlconn.AddrDumper) *Link {
	return &Link{link: k.link, dump: d}
}

// Index is the device's interface index.
func (k *Link) Index() int { return k.link.Attrs().Index }

// Addrs implements Link: one RTM_GETADDR dump of the device. The binding
// handle's dump (after a change by others; at startup) goes through
// netlink.Handle.AddrList, which parses every link's addresses; a Reader's,
// every full sync's, through its dumper.
func (k *Link) Addrs() ([]netip.Prefix, error) {
	if k.dump != nil {
		var out []netip.Prefix
		err := k.dump.Dump(nlconn.AddrFilter{Link: k.Index()}, func(a nlconn.Addr) {
			out = append(out, netip.PrefixFrom(a.Prefix.Addr().Unmap(), a.Prefix.Bits()))
		})
		return out, err
	}
	as, err := k.h.AddrList(k.link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(as))
	for _, a := range as {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

// infinityLifetime is INFINITY_LIFE_TIME: an address that never expires.
const infinityLifetime = 0xFFFFFFFF

func toAddr(p netip.Prefix) *netlink.Addr {
	a := p.Addr()
	bits := a.BitLen()
	nl := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}}
	nl.Flags = unix.IFA_F_NOPREFIXROUTE
	if a.Is6() {
		nl.Flags |= unix.IFA_F_NODAD
		// preferred_lft 0: deprecated, so never picked as the source of
		// the node's own or masqueraded traffic (RFC 6724 rule 3), while
		// it stays a local destination.
		nl.PreferedLft, nl.ValidLft = 0, infinityLifetime
	}
	return nl
}

// AddAddr implements Link; an address already there is no error.
func (k *Link) AddAddr(p netip.Prefix) error {
	if err := k.h.AddrAdd(k.link, toAddr(p)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("ip addr add %s dev %s: %w", p, addrmgr.Device, err)
	}
	return nil
}

// DelAddr implements Link; an address already gone is no error.
func (k *Link) DelAddr(p netip.Prefix) error {
	if err := k.h.AddrDel(k.link, toAddr(p)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("ip addr del %s dev %s: %w", p, addrmgr.Device, err)
	}
	return nil
}

var _ addrmgr.Watcher = (*Link)(nil)

// watchRcvBuf is the receive buffer asked for the address subscription
// (SO_RCVBUFFORCE, falling back to the default): a full sync's binds of
// tens of thousands of addresses each cause one event.
const watchRcvBuf = 8 << 20

// Watch implements Watcher: an RTM_NEWADDR/RTM_DELADDR subscription
// (`ip monitor address dev kube-ipvs0`), filtered on the device's index.
// It subscribes in the network namespace of the calling thread, which must
// be the handle's (checked: the device seen there must have the same index
// and hardware address). A lost subscription (ENOBUFS when events come
// faster than they are read, or any error) is reported to status and made
// again, retried with backoff, until ctx ends.
func (k *Link) Watch(ctx context.Context, event func(addrmgr.AddrEvent), status func(error)) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("this thread's network namespace: %w", err)
	}
	if err := k.sameDevice(ns); err != nil {
		ns.Close()
		return err
	}
	sub, err := k.subscribe(ns)
	if err != nil {
		ns.Close()
		return err
	}
	k.otherLinks(false) // followed from now on
	each := k.deliver(event)
	go func() {
		defer ns.Close()
		nlconn.Follow(ctx, sub, func() (*nlconn.Sub[nlconn.AddrUpdate], error) { return k.subscribe(ns) }, each,
			func(err error) {
				status(fmt.Errorf("%w: %w", addrmgr.ErrWatchLost, err))
				k.otherLinks(true)
			},
			func() {
				status(nil)
				k.otherLinks(false)
			})
	}()
	return nil
}

func (k *Link) otherLinks(lost bool) {
	if k.OtherLinks != nil {
		k.OtherLinks(lost)
	}
}

// sameDevice checks that kube-ipvs0 in ns is the device of the handle.
func (k *Link) sameDevice(ns netns.NsHandle) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in this thread's namespace: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByIndex(k.Index())
	if err != nil {
		return fmt.Errorf("%w: no link %d in this thread's namespace: %v", ErrWatchNamespace, k.Index(), err)
	}
	if a, b := l.Attrs(), k.link.Attrs(); a.Name != b.Name || a.HardwareAddr.String() != b.HardwareAddr.String() {
		return fmt.Errorf("%w: link %d is %s %s here, %s %s through the handle", ErrWatchNamespace, k.Index(), a.Name, a.HardwareAddr, b.Name, b.HardwareAddr)
	}
	return nil
}

// ErrWatchNamespace is returned by Watch when the calling thread is not in
// the namespace of the link's handle.
var ErrWatchNamespace = errors.New("not the namespace of the " + addrmgr.Device + " handle")

func (k *Link) subscribe(ns netns.NsHandle) (*nlconn.Sub[nlconn.AddrUpdate], error) {
	s, err := nlconn.SubscribeAddrs(ns, watchRcvBuf)
	if err != nil {
		return nil, fmt.Errorf("ip monitor address dev %s: %w", addrmgr.Device, err)
	}
	return s, nil
}

// deliver turns the subscription's updates into events of the link, and
// tells OtherLinks (if set) of the other links' updates.
func (k *Link) deliver(event func(addrmgr.AddrEvent)) func(nlconn.AddrUpdate) {
	index := k.Index()
	return func(u nlconn.AddrUpdate) {
		if u.LinkIndex != index {
			if k.OtherLinks != nil {
				k.OtherLinks(false)
			}
			return
		}
		event(addrmgr.AddrEvent{Prefix: netip.PrefixFrom(u.Prefix.Addr().Unmap(), u.Prefix.Bits()), Added: u.Added})
	}
}
