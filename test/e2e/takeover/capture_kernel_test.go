//go:build kernel

package takeover

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// capture is an AF_PACKET socket in one network namespace (every
// interface, both directions) keeping its last ringSize TCP segments: the
// evidence for a request that failed (see evidence).
type capture struct {
	fd      int
	mu      sync.Mutex
	ring    []packet
	next    int
	full    bool
	stopped atomic.Bool
	done    chan struct{}
	ifNames map[int]string
	// dropLog is when the socket dropped segments: each entry the drops
	// counted between its after and its at (readDrops).
	dropLog  []dropSpan
	lastRead time.Time
}

// dropSpan is a number of segments the kernel could not queue to the
// socket, between two reads of its statistics.
type dropSpan struct {
	after, at time.Time
	n         uint32
}

// dropEvery is how often the reader reads the socket's drop count.
const dropEvery = 100 * time.Millisecond

const ringSize = 400_000

// startCapture opens the socket in ns (`socket(AF_PACKET, SOCK_DGRAM,
// ETH_P_ALL)`: network-layer packets of every interface) and reads it until
// stop.
func startCapture(t *testing.T, ns *ktest.NS) *capture {
	t.Helper()
	c := &capture{ring: make([]packet, ringSize), done: make(chan struct{}), ifNames: map[int]string{}}
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		c.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, i := range ifs {
			c.ifNames[i.Index] = i.Name
		}
		return nil
	})
	if err != nil {
		t.Fatalf("capture in %s: %v", ns.Name, err)
	}
	go c.read()
	t.Cleanup(c.stop)
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *capture) read() {
	defer close(c.done)
	defer unix.Close(c.fd)
	buf := make([]byte, 256)
	c.lastRead = time.Now()
	for !c.stopped.Load() {
		if time.Since(c.lastRead) >= dropEvery {
			c.readDrops()
		}
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok {
			continue
		}
		p, ok := parseTCP(buf[:min(n, len(buf))], htons(ll.Protocol))
		if !ok {
			continue
		}
		p.at = time.Now()
		p.out = ll.Pkttype == unix.PACKET_OUTGOING
		p.ifName = c.ifNames[ll.Ifindex]
		if p.ifName == "" {
			p.ifName = fmt.Sprintf("if%d", ll.Ifindex)
		}
		c.mu.Lock()
		c.ring[c.next] = p
		c.next++
		if c.next == len(c.ring) {
			c.next, c.full = 0, true
		}
		c.mu.Unlock()
	}
}

// since returns the segments seen at or after from that satisfy keep, and
// how many the socket dropped so far (PACKET_STATISTICS; reading resets the
// kernel's count, so it is summed here).
func (c *capture) since(from time.Time, keep func(packet) bool) (out []packet, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	walk := func(ps []packet) {
		for _, p := range ps {
			if !p.at.Before(from) {
				total++
				if keep(p) {
					out = append(out, p)
				}
			}
		}
	}
	if c.full {
		walk(c.ring[c.next:])
	}
	walk(c.ring[:c.next])
	return out, total
}

// readDrops reads PACKET_STATISTICS (which resets the kernel's counts)
// and logs the drops since the last read with the span they fell in.
func (c *capture) readDrops() {
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && st.Drops > 0 {
		c.dropLog = append(c.dropLog, dropSpan{after: c.lastRead, at: now, n: st.Drops})
	}
	c.lastRead = now
}

// dropsBetween is how many segments the socket may have dropped between
// from and to: those of every read of its statistics whose span overlaps
// them (the reader reads them every dropEvery). A drop elsewhere in the
// run does not make a capture of this span incomplete.
func (c *capture) dropsBetween(from, to time.Time) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint32
	for _, d := range c.dropLog {
		if d.at.After(from) && d.after.Before(to) {
			n += d.n
		}
	}
	return n
}

// drops is every segment the socket dropped so far.
func (c *capture) drops() uint32 {
	return c.dropsBetween(time.Time{}, time.Now().Add(time.Hour))
}

func (c *capture) stop() {
	if c.stopped.CompareAndSwap(false, true) {
		<-c.done
	}
}
