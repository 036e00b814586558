package cluster

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// ErrArgs is wrapped by the errors ParseNetexec returns.
var ErrArgs = errors.New("container args")

// Netexec is the part of agnhost's `netexec` the upstream [sig-network]
// tests talk to: HTTP GET /hostname (and /hostName), /clientip ("IP:PORT"
// of the peer as the server saw it), /echo?msg=M, /healthz and /readyz on
// HTTPPort; on UDPPort the datagrams "hostname" (or "hostName"),
// "echo M" and "clientip". A port of 0 is not served. UDPListenAddrs,
// when set, are the addresses the UDP port is bound to, one socket each
// (agnhost's --udp-listen-addresses, which the upstream tests set for
// hostNetwork pods: a wildcard socket answers a NATed request from the
// address routing picks, which is not the one IPVS sent it to).
// DelayShutdown is agnhost's --delay-shutdown (seconds): once Shutdown
// is closed (the agent's SIGTERM) /readyz answers 503 while the server
// keeps serving, so a terminating pod turns unready, as agnhost does.
type Netexec struct {
	Hostname       string
	HTTPPort       int
	UDPPort        int
	UDPListenAddrs []netip.Addr
	DelayShutdown  int
	// Shutdown, when not nil, is closed when the pod is asked to end.
	Shutdown <-chan struct{}
}

// ParseNetexec reads a container's args in agnhost's form, ["netexec",
// "--http-port=8083", "--udp-port=8081"]: the agnhost subcommand and its
// flags (agnhost's defaults: HTTP 8080, UDP -1 = off). Other subcommands
// and flags are refused, naming them.
func ParseNetexec(hostname string, args []string) (Netexec, error) {
	if len(args) == 0 || args[0] != "netexec" {
		return Netexec{}, fmt.Errorf("%w: %q: only agnhost's netexec is served", ErrArgs, args)
	}
	fs := flag.NewFlagSet("netexec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := Netexec{Hostname: hostname}
	fs.IntVar(&n.HTTPPort, "http-port", 8080, "")
	fs.IntVar(&n.UDPPort, "udp-port", -1, "")
	fs.IntVar(&n.DelayShutdown, "delay-shutdown", 0, "")
	fs.Func("udp-listen-addresses", "", func(v string) error {
		for _, a := range strings.Split(v, ",") {
			addr, err := netip.ParseAddr(a)
			if err != nil {
				return err
			}
			n.UDPListenAddrs = append(n.UDPListenAddrs, addr)
		}
		return nil
	})
	if err := fs.Parse(args[1:]); err != nil {
		return Netexec{}, fmt.Errorf("%w: %q: %w", ErrArgs, args, err)
	}
	n.UDPPort = max(n.UDPPort, 0)
	return n, nil
}

// Listen opens the server's sockets in the calling thread's network
// namespace (call it inside ktest's NS.Do) and serves them from other
// goroutines; the sockets stay in that namespace. stop closes them.
func (n Netexec) Listen() (stop func(), err error) {
	var closers []io.Closer
	var wg sync.WaitGroup
	stop = func() {
		for _, c := range closers {
			c.Close()
		}
		wg.Wait()
	}
	if n.HTTPPort > 0 {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", n.HTTPPort))
		if err != nil {
			return nil, fmt.Errorf("netexec: listen tcp/%d: %w", n.HTTPPort, err)
		}
		srv := &http.Server{Handler: n.mux(), ReadHeaderTimeout: 10 * time.Second}
		closers = append(closers, srv)
		wg.Add(1)
		go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	}
	if n.UDPPort > 0 {
		addrs := []string{fmt.Sprintf(":%d", n.UDPPort)}
		if len(n.UDPListenAddrs) > 0 {
			addrs = nil
			for _, a := range n.UDPListenAddrs {
				addrs = append(addrs, netip.AddrPortFrom(a, uint16(n.UDPPort)).String())
			}
		}
		for _, addr := range addrs {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				stop()
				return nil, fmt.Errorf("netexec: listen udp %s: %w", addr, err)
			}
			closers = append(closers, pc)
			wg.Add(1)
			go func() { defer wg.Done(); n.serveUDP(pc) }()
		}
	}
	return stop, nil
}

func (n Netexec) mux() *http.ServeMux {
	m := http.NewServeMux()
	hostname := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, n.Hostname) }
	m.HandleFunc("/hostname", hostname)
	m.HandleFunc("/hostName", hostname)
	m.HandleFunc("/clientip", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.RemoteAddr) })
	m.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.FormValue("msg")) })
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }
	m.HandleFunc("/healthz", ok)
	m.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if n.shuttingDown() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	return m
}

// shuttingDown reports whether the server is in its --delay-shutdown
// window: asked to end, still serving, not ready.
func (n Netexec) shuttingDown() bool {
	if n.DelayShutdown <= 0 || n.Shutdown == nil {
		return false
	}
	select {
	case <-n.Shutdown:
		return true
	default:
		return false
	}
}

// serveUDP answers each datagram with one datagram, as netexec's UDP
// server: the hostname, the echoed message or the peer's address.
func (n Netexec) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		size, peer, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		req := strings.TrimSpace(string(buf[:size]))
		var resp string
		switch {
		case req == "hostname" || req == "hostName":
			resp = n.Hostname
		case req == "clientip":
			resp = peer.String()
		case strings.HasPrefix(req, "echo "):
			resp = strings.TrimPrefix(req, "echo ")
		default:
			resp = "unknown request " + req
		}
		_, _ = pc.WriteTo([]byte(resp), peer)
	}
}
