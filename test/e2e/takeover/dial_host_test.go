package takeover

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDialTCP checks, on the host's loopback, that a failed dial names
// the port its SYNs left from: refused, and timed out against a listener
// whose accept queue is full (its kernel drops further SYNs), the port
// compared with the SYN_SENT socket /proc/net/tcp shows meanwhile.
func TestDialTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "pod-x %s\n", c.RemoteAddr())
			c.Close()
		}
	}()
	out, err := requestFrom(netip.MustParseAddrPort(ln.Addr().String()), time.Now().Add(10*time.Second))
	if err != nil || !strings.HasPrefix(out, "pod-x 127.0.0.1:") {
		t.Errorf("request to a listener: %q %v, want its answer", out, err)
	}
	closed := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()

	_, err = requestFrom(closed, time.Now().Add(10*time.Second))
	var re *requestError
	if !errors.As(err, &re) || re.op != "dial" || !errors.Is(err, unix.ECONNREFUSED) || re.local.Port() == 0 {
		t.Errorf("dial of a closed port: %v (%#v), want a refused dial naming its local port", err, re)
	}

	full := fullListener(t)
	type result struct {
		err error
	}
	done := make(chan result, 1)
	deadline := time.Now().Add(1500 * time.Millisecond)
	go func() { _, err := requestFrom(full, deadline); done <- result{err} }()
	var seen uint16
	var res result
wait:
	for {
		select {
		case res = <-done:
			break wait
		case <-time.After(20 * time.Millisecond):
			if p := synSentFrom(t, full.Port()); p != 0 {
				seen = p
			}
		}
	}
	re = nil
	if !errors.As(res.err, &re) || re.op != "dial" || !errors.Is(res.err, os.ErrDeadlineExceeded) || !re.deadline.Equal(deadline) {
		t.Fatalf("dial of a listener that drops SYNs: %v (%#v), want a dial timeout with its deadline", res.err, re)
	}
	if seen == 0 || re.local.Port() != seen {
		t.Errorf("dial timeout names local %v, the SYN_SENT socket to port %d had local port %d", re.local, full.Port(), seen)
	}
	if want := fmt.Sprintf("dial tcp %s->%s: i/o timeout", re.local, full); res.err.Error() != want {
		t.Errorf("error %q, want %q", res.err, want)
	}
}

// fullListener is a loopback listener with a backlog of 0 whose one queued
// connection is never accepted: its kernel drops every SYN after that.
func fullListener(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	ap := sockname(fd)
	c, err := net.DialTimeout("tcp", ap.String(), 10*time.Second)
	if err != nil {
		t.Fatalf("the connection that fills the queue: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return ap
}

// synSentFrom is the local port of a SYN_SENT socket to 127.0.0.1:port in
// /proc/net/tcp, or 0.
func synSentFrom(t *testing.T, port uint16) uint16 {
	b, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		// sl local_address rem_address st ...; st 02 is SYN_SENT.
		if len(f) < 4 || f[3] != "02" || !strings.HasSuffix(f[2], fmt.Sprintf(":%04X", port)) {
			continue
		}
		var p uint16
		if _, err := fmt.Sscanf(f[1][strings.IndexByte(f[1], ':')+1:], "%X", &p); err == nil {
			return p
		}
	}
	return 0
}
