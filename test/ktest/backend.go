package ktest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Proto is a transport protocol the backends serve and Request speaks.
type Proto string

// Protocols.
const (
	TCP  Proto = "tcp"
	UDP  Proto = "udp"
	SCTP Proto = "sctp"
)

// RequestTimeout bounds one Request (connect plus answer).
var RequestTimeout = 3 * time.Second

// Listen starts the pod's backend for proto on port (both families,
// wildcard address). It answers every TCP/SCTP connection and every UDP
// datagram with one line "NAME SOURCE-ADDRESS\n", SOURCE-ADDRESS being the
// peer address the pod saw (e.g. "pod-a 10.244.0.1" or "pod-a 198.51.100.11").
// It stops when the pod is closed.
func (p *Pod) Listen(t testing.TB, proto Proto, port int) {
	t.Helper()
	var stop func()
	err := p.Do(func() error {
		var err error
		stop, err = serve(p.Name, proto, port)
		return err
	})
	if err != nil {
		t.Fatalf("pod %s: listen %s/%d: %v", p.Name, proto, port, err)
	}
	p.onClose(stop)
}

func answer(name string, peer netip.Addr) []byte {
	return []byte(name + " " + peer.Unmap().String() + "\n")
}

// serve opens the listener in the current thread's namespace and serves from
// other goroutines (the socket stays in the namespace it was made in).
func serve(name string, proto Proto, port int) (stop func(), err error) {
	var wg sync.WaitGroup
	switch proto {
	case TCP:
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
				c.SetDeadline(time.Now().Add(RequestTimeout))
				c.Write(answer(name, peer))
				c.Close()
			}
		}()
		return func() { l.Close(); wg.Wait() }, nil
	case UDP:
		c, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		if err != nil {
			return nil, err
		}
		uc := c.(*net.UDPConn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 2048)
			for {
				_, from, err := uc.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				uc.WriteToUDPAddrPort(answer(name, from.Addr()), from)
			}
		}()
		return func() { c.Close(); wg.Wait() }, nil
	case SCTP:
		return serveSCTP(name, port)
	}
	return nil, fmt.Errorf("ktest: unknown protocol %q", proto)
}

// serveSCTP serves one-to-one SCTP (socket(AF_INET6, SOCK_STREAM,
// IPPROTO_SCTP)), which the standard library lacks. Accept wakes every 200ms
// to notice stop.
func serveSCTP(name string, port int) (func(), error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, fmt.Errorf("sctp socket: %w", err)
	}
	fail := func(err error) (func(), error) { unix.Close(fd); return nil, err }
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return fail(err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: port}); err != nil {
		return fail(fmt.Errorf("sctp bind: %w", err))
	}
	if err := unix.Listen(fd, 64); err != nil {
		return fail(err)
	}
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer unix.Close(fd)
		for {
			select {
			case <-done:
				return
			default:
			}
			nfd, sa, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				return
			}
			unix.Write(nfd, answer(name, sockaddrAddr(sa)))
			unix.Close(nfd)
		}
	}()
	return func() { close(done); wg.Wait() }, nil
}

func sockaddrAddr(sa unix.Sockaddr) netip.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr)
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr)
	}
	return netip.Addr{}
}

// Request sends one request from inside the namespace to addr ("10.96.0.10:80",
// "[fd00::10]:80") and returns the answer without its newline, e.g.
// "pod-a 10.96.0.10". UDP sends one datagram and waits RequestTimeout.
func (ns *NS) Request(proto Proto, addr string) (string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", fmt.Errorf("ktest: request address %q: %w", addr, err)
	}
	var out string
	err = ns.Do(func() error {
		var err error
		out, err = request(proto, ap)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("%s request to %s from %s: %w", proto, addr, ns.Name, err)
	}
	return out, nil
}

// MustRequest is Request failing the test on error.
func (ns *NS) MustRequest(t testing.TB, proto Proto, addr string) string {
	t.Helper()
	out, err := ns.Request(proto, addr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Hits sends n requests and counts answers by backend name (the answer's
// first word). It fails the test on any error.
func (ns *NS) Hits(t testing.TB, proto Proto, addr string, n int) map[string]int {
	t.Helper()
	hits := map[string]int{}
	for i := 0; i < n; i++ {
		out := ns.MustRequest(t, proto, addr)
		name, _, _ := strings.Cut(out, " ")
		hits[name]++
	}
	return hits
}

func request(proto Proto, ap netip.AddrPort) (string, error) {
	deadline := time.Now().Add(RequestTimeout)
	switch proto {
	case TCP:
		c, err := net.DialTimeout("tcp", ap.String(), RequestTimeout)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		b, err := io.ReadAll(c)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	case UDP:
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ap))
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return "", err
		}
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(buf[:n])), nil
	case SCTP:
		return requestSCTP(ap)
	}
	return "", fmt.Errorf("ktest: unknown protocol %q", proto)
}

func requestSCTP(ap netip.AddrPort) (string, error) {
	var (
		family int
		sa     unix.Sockaddr
	)
	if a := ap.Addr().Unmap(); a.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return "", fmt.Errorf("sctp socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(RequestTimeout.Nanoseconds())
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := connectSCTP(fd, sa); err != nil {
		return "", fmt.Errorf("sctp connect: %w", err)
	}
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue // nothing was read: see connectSCTP
		}
		if n > 0 {
			out = append(out, buf[:n]...)
		}
		if err != nil {
			if len(out) > 0 {
				break
			}
			return "", fmt.Errorf("sctp read: %w", err)
		}
		if n == 0 || strings.HasSuffix(string(out), "\n") {
			break
		}
	}
	return strings.TrimSpace(string(out)), nil
}

// connectSCTP is connect(2) on the blocking socket fd, whose SO_SNDTIMEO is
// set. With a socket timeout the kernel never restarts connect after a
// signal handler ran (signal(7)), and the Go runtime signals its threads
// (SIGURG, for preemption) at any time: connect then fails with EINTR
// while the association goes on being set up. That is no answer of the
// network, so connectSCTP waits for the outcome as for a non-blocking
// connect: poll for writability within RequestTimeout, then SO_ERROR.
func connectSCTP(fd int, sa unix.Sockaddr) error {
	err := unix.Connect(fd, sa)
	if !errors.Is(err, unix.EINTR) {
		return err
	}
	deadline := time.Now().Add(RequestTimeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("interrupted, then no association within %v: %w", RequestTimeout, unix.ETIMEDOUT)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("interrupted, then poll: %w", err)
		}
		if n == 0 {
			continue
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return fmt.Errorf("interrupted, then SO_ERROR: %w", err)
		}
		if soErr != 0 {
			return fmt.Errorf("interrupted, then: %w", unix.Errno(soErr))
		}
		return nil
	}
}
