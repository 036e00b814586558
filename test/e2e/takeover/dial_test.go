package takeover

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// A TCP request of the loops that fails must name its local endpoint, or
// the capture cannot find its flow: net.Dial's error names none when the
// dial itself fails, so the loops dial with dialTCP, which keeps it.

// requestError is a failed TCP request of the loops: what failed ("dial"
// or "read"), the endpoints, and the client's deadline for the dial and
// the answer together, which the capture's verdict judges against.
type requestError struct {
	op            string
	local, remote netip.AddrPort
	deadline      time.Time
	err           error
}

// Error reads as net.OpError's ("dial tcp 10.244.0.4:38208->10.96.170.131:80:
// i/o timeout"), with the local endpoint a dial error of net lacks.
func (e *requestError) Error() string {
	return fmt.Sprintf("%s tcp %s->%s: %v", e.op, e.local, e.remote, e.err)
}

func (e *requestError) Unwrap() error { return e.err }

// requestTCP is ktest's TCP Request (connect, read the answer until the
// backend closes, RequestTimeout for both) from inside ns, its failures a
// *requestError.
func requestTCP(ns *ktest.NS, addr string) (string, error) {
	remote, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", fmt.Errorf("request address %q: %w", addr, err)
	}
	var out string
	err = ns.Do(func() error {
		var err error
		out, err = requestFrom(remote, time.Now().Add(ktest.RequestTimeout))
		return err
	})
	return out, err
}

// requestFrom sends one TCP request from the calling thread's namespace.
func requestFrom(remote netip.AddrPort, deadline time.Time) (string, error) {
	c, local, err := dialTCP(remote, deadline)
	if err != nil {
		return "", &requestError{op: "dial", local: local, remote: remote, deadline: deadline, err: err}
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		return "", &requestError{op: "read", local: local, remote: remote, deadline: deadline, err: unwrapOp(err)}
	}
	return strings.TrimSpace(string(b)), nil
}

// unwrapOp is the cause of a net.OpError, whose own text would repeat the
// endpoints.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err
	}
	return err
}

// dialTCP connects to remote as net.Dial does, without binding first (so
// the kernel picks the source port per destination, as it does for any
// client: two sockets to two Services may share one), and returns the
// local endpoint even when the dial fails: a non-blocking connect(2),
// then getsockname(2) at once (the port is chosen when the SYN is sent),
// then a wait for the handshake until deadline.
func dialTCP(remote netip.AddrPort, deadline time.Time) (net.Conn, netip.AddrPort, error) {
	return dialFrom(netip.AddrPort{}, remote, deadline)
}

// dialFrom is dialTCP bound to bind first when it is valid, with
// SO_REUSEADDR (`ncat --source-port`): how a kernel test makes two
// connections share a source port on purpose.
func dialFrom(bind, remote netip.AddrPort, deadline time.Time) (net.Conn, netip.AddrPort, error) {
	family, sa := sockaddr(remote)
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("socket: %w", err)
	}
	if bind.IsValid() {
		_, bsa := sockaddr(bind)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			unix.Close(fd)
			return nil, netip.AddrPort{}, fmt.Errorf("SO_REUSEADDR: %w", err)
		}
		if err := unix.Bind(fd, bsa); err != nil {
			unix.Close(fd)
			return nil, netip.AddrPort{}, fmt.Errorf("bind %s: %w", bind, err)
		}
	}
	err = unix.Connect(fd, sa)
	local := sockname(fd)
	// EINTR: the connect goes on, as EINPROGRESS (net does the same).
	if err != nil && !errors.Is(err, unix.EINPROGRESS) && !errors.Is(err, unix.EINTR) {
		unix.Close(fd)
		return nil, local, fmt.Errorf("connect: %w", err)
	}
	f := os.NewFile(uintptr(fd), "tcp")
	c, err := net.FileConn(f) // a duplicate, in the runtime's poller
	f.Close()
	if err != nil {
		return nil, local, err
	}
	if err := waitConnected(c, deadline); err != nil {
		c.Close()
		return nil, local, err
	}
	return c, local, nil
}

// waitConnected waits until c's connect ends (writable: SO_ERROR tells
// how) or deadline passes (os.ErrDeadlineExceeded, "i/o timeout").
func waitConnected(c net.Conn, deadline time.Time) error {
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var result error
	werr := rc.Write(func(s uintptr) bool {
		n, err := unix.GetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			result = fmt.Errorf("getsockopt SO_ERROR: %w", err)
		case n != 0:
			result = fmt.Errorf("connect: %w", syscall.Errno(n))
		default:
			if _, err := unix.Getpeername(int(s)); err != nil {
				return false // still connecting
			}
		}
		return true
	})
	if werr != nil {
		return unwrapOp(werr) // "raw-write" says nothing of the dial
	}
	return result
}

// sockaddr is ap as connect(2) and bind(2) take it, with its family.
func sockaddr(ap netip.AddrPort) (int, unix.Sockaddr) {
	if a := ap.Addr().Unmap(); a.Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// sockname is fd's local endpoint, or the zero AddrPort.
func sockname(fd int) netip.AddrPort {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}
