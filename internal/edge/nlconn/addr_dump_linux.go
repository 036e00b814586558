package nlconn

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// AddrDumper is a route netlink socket for address dumps. It is not safe for
// concurrent use: one dump at a time.
type AddrDumper struct {
	sock *nl.SocketHandle
	// Strict is whether the kernel took strict checking (Linux 4.20):
	// then a dump of one link gets that link's addresses alone.
	Strict bool
}

// Open opens a route netlink socket in the calling thread's network
// namespace, with strict checking when the kernel has it and the netlink
// library's send and receive timeouts, so that a dump the kernel never
// finishes fails instead of holding its caller.
func OpenAddrDumper() (*AddrDumper, error) {
	s, err := OpenSocket(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	strict := unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1) == nil
	return &AddrDumper{sock: &nl.SocketHandle{Socket: s}, Strict: strict}, nil
}

// Close closes the socket.
func (d *AddrDumper) Close() { d.sock.Close() }

// Dump is `ip -o addr show` of the links f keeps: it calls each for every
// IPv4 and IPv6 address, in the kernel's order. An interrupted dump (the
// addresses changed during it) is an error, after each saw what came.
func (d *AddrDumper) Dump(f AddrFilter, each func(Addr)) error {
	req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: d.sock}
	msg := nl.NewIfAddrmsg(unix.AF_UNSPEC)
	if d.Strict && f.Link > 0 {
		msg.Index = uint32(f.Link)
	}
	req.AddData(msg)
	var perr error
	err := req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWADDR, func(m []byte) bool {
		if i, ok := linkIndex(m); ok && !f.wants(i) {
			return true
		}
		a, ok, err := parseAddr(m)
		if err != nil {
			perr = err
			return false
		}
		if ok {
			each(a)
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("ip addr show: %w", err)
	}
	return nil
}
