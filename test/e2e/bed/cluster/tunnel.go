package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// KubeletTunnel carries the API server's connections into the cluster
// from the host into the VM: the API server's egress selector for
// "cluster" (--egress-selector-config-file, the mechanism konnectivity
// uses) sends `CONNECT node-a:10250` (exec, logs) or `CONNECT
// 10.244.1.4:80` (the pod proxy) over a Unix socket. The tunnel dials the
// host port qemu forwards to that node's kubelet in the guest; for a pod,
// it asks the kubelet API of the node owning the address to CONNECT on
// (podconnect.go). A target it has no route for is answered 502 and
// logged.
type KubeletTunnel struct {
	l      net.Listener
	routes TunnelRoutes
	logf   func(format string, args ...any)
	wg     sync.WaitGroup
	dir    string // removed by Close when set (StartEgressTunnel's)
}

// TunnelRoutes are where a KubeletTunnel sends each CONNECT target.
type TunnelRoutes struct {
	// Kubelets maps a kubelet's HOST:PORT, as the API server names it (a
	// Node's preferred address and kubelet port), to the TCP address to
	// dial.
	Kubelets map[string]string
	// Pods sends an IP in a node's pod addresses to that node's kubelet.
	Pods []PodRoute
}

// PodRoute is one node's pod addresses, as `ip route add PREFIX via NODE`
// on a control plane host would route them: its pod CIDR, or its node IP
// as a /32 for its hostNetwork pods.
type PodRoute struct {
	Prefix netip.Prefix
	// Kubelet is the TCP address to dial for that node's kubelet API.
	Kubelet string
}

// podKubelet is the kubelet to ask for a CONNECT to target, if target is
// an IP:PORT in one of the pod routes (the longest prefix wins).
func (r TunnelRoutes) podKubelet(target string) (netip.AddrPort, string, bool) {
	addr, err := netip.ParseAddrPort(target)
	if err != nil {
		return netip.AddrPort{}, "", false
	}
	best := -1
	kubelet := ""
	for _, p := range r.Pods {
		if p.Prefix.Contains(addr.Addr()) && p.Prefix.Bits() > best {
			best, kubelet = p.Prefix.Bits(), p.Kubelet
		}
	}
	return addr, kubelet, best >= 0
}

// StartKubeletTunnel listens on the Unix socket sock and sends each
// CONNECT by routes.
func StartKubeletTunnel(sock string, routes TunnelRoutes, logf func(format string, args ...any)) (*KubeletTunnel, error) {
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("kubelet tunnel: listen %s: %w", sock, err)
	}
	t := &KubeletTunnel{l: l, routes: routes, logf: logf}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.wg.Add(1)
			go func() { defer t.wg.Done(); t.serve(c) }()
		}
	}()
	return t, nil
}

// StartEgressTunnel is StartKubeletTunnel on a socket in a new temporary
// directory (a Unix socket's path has at most 107 bytes), with the API
// server's egress selector configuration for it beside it; flag is the
// kube-apiserver flag that reads it. Close removes the directory.
func StartEgressTunnel(routes TunnelRoutes, logf func(format string, args ...any)) (t *KubeletTunnel, flag string, err error) {
	dir, err := os.MkdirTemp("", "kt")
	if err != nil {
		return nil, "", fmt.Errorf("kubelet tunnel: %w", err)
	}
	sock, egress := filepath.Join(dir, "tunnel.sock"), filepath.Join(dir, "egress.yaml")
	if err := os.WriteFile(egress, EgressSelectorConfig(sock), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", fmt.Errorf("kubelet tunnel: %w", err)
	}
	if t, err = StartKubeletTunnel(sock, routes, logf); err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", err
	}
	t.dir = dir
	return t, "--egress-selector-config-file=" + egress, nil
}

// ForwardedKubelet is where a KubeletTunnel dials the kubelet API on
// guestPort of the VM: a host port that was free on 127.0.0.1, and the
// qemu host forward (vmtest.Config.HostForwards) from it to guestPort.
func ForwardedKubelet(guestPort int) (dial string, fwd vmtest.HostForward, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fwd, fmt.Errorf("kubelet tunnel: a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), vmtest.HostForward{HostPort: port, GuestPort: guestPort}, nil
}

// Close stops accepting and waits for the tunnels under way to end.
func (t *KubeletTunnel) Close() {
	_ = t.l.Close()
	t.wg.Wait()
	if t.dir != "" {
		_ = os.RemoveAll(t.dir)
	}
}

// serve answers one CONNECT and then copies bytes both ways.
func (t *KubeletTunnel) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		t.logf("kubelet tunnel: reading CONNECT: %v", err)
		return
	}
	if req.Method != http.MethodConnect {
		t.logf("kubelet tunnel: %s %s refused: only CONNECT is served", req.Method, req.Host)
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	var (
		up   net.Conn
		upR  io.Reader
		dErr error
	)
	if kubelet, ok := t.routes.Kubelets[req.Host]; ok {
		up, dErr = net.DialTimeout("tcp", kubelet, connectTimeout)
		upR = up
	} else if pod, kubelet, ok := t.routes.podKubelet(req.Host); ok {
		var r *bufio.Reader
		up, r, dErr = dialThroughKubelet(kubelet, pod)
		upR = r
	} else {
		t.logf("kubelet tunnel: CONNECT %s refused: no node's kubelet or pod addresses are there", req.Host)
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	if dErr != nil {
		t.logf("kubelet tunnel: CONNECT %s: %v", req.Host, dErr)
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	_ = c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(c, br, up, upR)
}

// closeWrite half-closes a connection that supports it, so the peer sees
// the end of one direction while the other still flows.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// EgressSelectorConfig is the API server's egress selector configuration
// that sends its "cluster" traffic (to kubelets, among others) through the
// HTTP CONNECT proxy on the Unix socket sock.
func EgressSelectorConfig(sock string) []byte {
	return fmt.Appendf(nil, `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %q
`, sock)
}
