package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Batched writes: several IPVS requests in one sendmsg, each acknowledged
// on its own. The kernel's netlink_rcv_skb runs every request of a buffer
// in turn and answers each with an acknowledgement carrying its sequence
// number, so one request's failure is reported to it alone and the others
// go on. A virtual server's real servers then cost one round trip instead
// of one each: at 10,000 Services × 10 endpoints, 100,000 round trips of
// the first sync became about 10,000.

// batchBytes is how many bytes of requests one sendmsg carries at most
// (about 300 real servers).
const batchBytes = 32 << 10

// The kernel runs a whole sendmsg before the proxy reads any answer, so
// every acknowledgement of a batch must fit the socket's receive buffer at
// once, or the ones that do not are dropped (ENOBUFS). An acknowledgement
// is a buffer of its own, about 700 bytes of the receive buffer's
// accounting (ackCost, with room to spare); the writer asks for
// writerRcvBuf and sends no more requests at a time than the buffer it got
// holds acknowledgements for.
const (
	writerRcvBuf = 2 << 20
	ackCost      = 2 << 10
	minBatch     = 16
)

// errNoAck is the outcome of a request whose acknowledgement never came
// (the socket timed out or failed while reading them): the kernel may or
// may not have run it.
var errNoAck = errors.New("no acknowledgement from the kernel")

// writer is the generic netlink socket the Table sends batched requests
// on, with its send and receive buffers.
type writer struct {
	sock   *nl.NetlinkSocket
	family uint16
	seq    uint32
	// max is how many requests one sendmsg carries at most, from the
	// receive buffer's size.
	max  int
	send []byte
	recv []byte
	// acked[i] is request i's outcome in the batch being read; known[i]
	// whether it was acknowledged.
	acked []error
	known []bool
}

// openWriter opens a generic netlink socket in the calling thread's network
// namespace for the IPVS family, with the library's timeouts: a batch the
// kernel never acknowledges fails instead of holding the sync forever.
func openWriter(family uint16) (*writer, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("generic netlink socket: %w", err)
	}
	if err := errors.Join(s.SetSendTimeout(&nl.SocketTimeoutTv), s.SetReceiveTimeout(&nl.SocketTimeoutTv)); err != nil {
		s.Close()
		return nil, fmt.Errorf("generic netlink socket timeouts: %w", err)
	}
	// A forced buffer where the proxy may (CAP_NET_ADMIN), the default
	// otherwise; acknowledgements carry no copy of a failed request.
	fd := s.GetFd()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, writerRcvBuf); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, writerRcvBuf)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	rcvbuf, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("generic netlink socket receive buffer: %w", err)
	}
	return &writer{sock: s, family: family, max: max(rcvbuf/ackCost, minBatch), recv: make([]byte, 64<<10)}, nil
}

func (w *writer) close() { w.sock.Close() }

// addDests adds rss to k's virtual server (`ipvsadm -a` each), batchBytes
// of requests per round trip, and calls each with every real server's
// outcome in order.
func (w *writer) addDests(k ipvs.Key, rss []ipvs.RealServer, each func(i int, err error)) {
	for start := 0; start < len(rss); {
		w.send = w.send[:0]
		first := w.seq + 1
		n := 0
		for start+n < len(rss) && n < w.max && len(w.send) < batchBytes {
			w.send = appendNewDest(w.send, w.family, first+uint32(n), k, rss[start+n])
			n++
		}
		w.seq += uint32(n)
		w.roundTrip(first, n)
		for i := 0; i < n; i++ {
			err := w.acked[i]
			if err != nil {
				rs := rss[start+i]
				err = fmt.Errorf("ipvsadm -a %s -r %s -m -w %d: %w", k, netip.AddrPortFrom(rs.Address, rs.Port), rs.Weight, mapErrno(err))
			}
			each(start+i, err)
		}
		start += n
	}
}

// roundTrip sends w.send, n requests numbered from first, and reads their
// acknowledgements into w.acked: nil, the kernel's errno, or the error
// that ended the read for those never acknowledged.
func (w *writer) roundTrip(first uint32, n int) {
	w.acked = slices.Grow(w.acked[:0], n)[:n]
	w.known = slices.Grow(w.known[:0], n)[:n]
	clear(w.acked)
	clear(w.known)
	fd := w.sock.GetFd()
	if err := unix.Sendto(fd, w.send, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		w.settle(fmt.Errorf("send %d IPVS requests: %w", n, err))
		return
	}
	// lost is set once the kernel dropped acknowledgements (ENOBUFS): the
	// ones queued are read without waiting, and the rest are not coming.
	var lost error
	for pending := n; pending > 0; {
		flags := 0
		if lost != nil {
			flags = unix.MSG_DONTWAIT
		}
		nr, from, err := unix.Recvfrom(fd, w.recv, flags)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS) && lost == nil:
			lost = err
			continue
		case err != nil && lost != nil:
			w.settle(fmt.Errorf("%w: %w", errNoAck, lost))
			return
		case err != nil:
			w.settle(fmt.Errorf("%w: %w", errNoAck, err))
			return
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // not from the kernel
		}
		pending -= w.readAcks(w.recv[:nr], first, n)
	}
}

// readAcks records the acknowledgements in b of requests first…first+n-1
// not yet known, and returns how many it recorded. Anything else (an
// acknowledgement of an earlier batch whose read timed out) is skipped.
func (w *writer) readAcks(b []byte, first uint32, n int) int {
	got := 0
	for len(b) >= nlmsgHeaderLen {
		h := binary.NativeEndian
		l := int(h.Uint32(b))
		if l < nlmsgHeaderLen || l > len(b) {
			break
		}
		i := int(h.Uint32(b[8:]) - first)
		if h.Uint16(b[4:]) == unix.NLMSG_ERROR && i >= 0 && i < n && !w.known[i] && l >= nlmsgHeaderLen+4 {
			if errno := -int32(h.Uint32(b[nlmsgHeaderLen:])); errno != 0 {
				w.acked[i] = syscall.Errno(errno)
			}
			w.known[i] = true
			got++
		}
		l = (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if l > len(b) {
			break
		}
		b = b[l:]
	}
	return got
}

// settle gives err to every request not yet acknowledged.
func (w *writer) settle(err error) {
	for i, k := range w.known {
		if !k {
			w.acked[i] = err
		}
	}
}
