package nlconn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ErrNoAck is wrapped by the outcome of a request whose acknowledgement
// never came (the socket timed out, failed, or the kernel dropped it): the
// kernel may or may not have run it.
var ErrNoAck = errors.New("no acknowledgement from the kernel")

// batchBytes is how many bytes of requests one sendmsg carries at most
// (about 300 IPVS real servers).
const batchBytes = 32 << 10

// The kernel runs a whole sendmsg before the writer reads any answer, so
// every acknowledgement of a batch must fit the socket's receive buffer at
// once, or the ones that do not are dropped (ENOBUFS). An acknowledgement
// is a buffer of its own, about 700 bytes of the receive buffer's
// accounting (ackCost, with room to spare); the writer asks for rcvBuf and
// sends no more requests at a time than the buffer it got holds
// acknowledgements for.
const (
	rcvBuf   = 2 << 20
	ackCost  = 2 << 10
	minBatch = 16
)

// Writer is one netlink socket of the network namespace it was opened in,
// sending batches of requests. It is not safe for concurrent use.
type Writer struct {
	sock *nl.NetlinkSocket
	seq  uint32
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

// Open opens a socket of the netlink protocol (unix.NETLINK_GENERIC,
// unix.NETLINK_ROUTE) in the calling thread's network namespace, with the
// library's timeouts: a batch the kernel never acknowledges fails instead
// of holding its caller forever. The receive buffer is forced where the
// caller may (CAP_NET_ADMIN) and the default otherwise; acknowledgements
// carry no copy of a failed request (NETLINK_CAP_ACK).
func OpenWriter(protocol int) (*Writer, error) {
	s, err := OpenSocket(protocol)
	if err != nil {
		return nil, err
	}
	fd := s.GetFd()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("netlink socket receive buffer: %w", err)
	}
	return &Writer{sock: s, max: max(got/ackCost, minBatch), recv: make([]byte, 64<<10)}, nil
}

// Close closes the socket.
func (w *Writer) Close() { w.sock.Close() }

// Do sends n requests, as many to a sendmsg as fit, and calls each with
// every request's outcome in order: nil, the kernel's errno
// (syscall.Errno), or an error wrapping ErrNoAck. encode appends request i
// with sequence number seq to b (Begin … End) and returns the buffer.
func (w *Writer) Do(n int, encode func(b []byte, i int, seq uint32) []byte, each func(i int, err error)) {
	for start := 0; start < n; {
		w.send = w.send[:0]
		first := w.seq + 1
		k := 0
		for start+k < n && k < w.max && len(w.send) < batchBytes {
			w.send = encode(w.send, start+k, first+uint32(k))
			k++
		}
		w.seq += uint32(k)
		w.roundTrip(first, k)
		for i := 0; i < k; i++ {
			each(start+i, w.acked[i])
		}
		start += k
	}
}

// roundTrip sends w.send, n requests numbered from first, and reads their
// acknowledgements into w.acked.
func (w *Writer) roundTrip(first uint32, n int) {
	w.acked = slices.Grow(w.acked[:0], n)[:n]
	w.known = slices.Grow(w.known[:0], n)[:n]
	clear(w.acked)
	clear(w.known)
	fd := w.sock.GetFd()
	if err := unix.Sendto(fd, w.send, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		w.settle(fmt.Errorf("send %d netlink requests: %w", n, err))
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
			w.settle(fmt.Errorf("%w: %w", ErrNoAck, lost))
			return
		case err != nil:
			w.settle(fmt.Errorf("%w: %w", ErrNoAck, err))
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
func (w *Writer) readAcks(b []byte, first uint32, n int) int {
	got := 0
	for len(b) >= headerLen {
		h := binary.NativeEndian
		l := int(h.Uint32(b))
		if l < headerLen || l > len(b) {
			break
		}
		i := int(h.Uint32(b[8:]) - first)
		if h.Uint16(b[4:]) == unix.NLMSG_ERROR && i >= 0 && i < n && !w.known[i] && l >= headerLen+4 {
			if errno := -int32(h.Uint32(b[headerLen:])); errno != 0 {
				w.acked[i] = syscall.Errno(errno)
			}
			w.known[i] = true
			got++
		}
		l = (l + align - 1) &^ (align - 1)
		if l > len(b) {
			break
		}
		b = b[l:]
	}
	return got
}

// settle gives err to every request not yet acknowledged.
func (w *Writer) settle(err error) {
	for i, k := range w.known {
		if !k {
			w.acked[i] = err
		}
	}
}
