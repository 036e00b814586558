package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// KubeletTunnel carries the API server's connections to the nodes'
// kubelets (exec) from the host into the VM: the API server's egress
// selector for "cluster" (--egress-selector-config-file, the mechanism
// konnectivity uses) sends `CONNECT node-a:10250` over a Unix socket, and
// the tunnel dials the host port qemu forwards to that node's kubelet in
// the guest. A target it has no route for is answered 502 and logged.
type KubeletTunnel struct {
	l      net.Listener
	routes map[string]string
	logf   func(format string, args ...any)
	wg     sync.WaitGroup
}

// StartKubeletTunnel listens on the Unix socket sock; routes maps a
// CONNECT target (HOST:PORT, as the API server names a node's kubelet:
// its preferred address and kubelet port) to the TCP address to dial.
func StartKubeletTunnel(sock string, routes map[string]string, logf func(format string, args ...any)) (*KubeletTunnel, error) {
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

// Close stops accepting and waits for the tunnels under way to end.
func (t *KubeletTunnel) Close() {
	_ = t.l.Close()
	t.wg.Wait()
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
	target, ok := t.routes[req.Host]
	if !ok {
		t.logf("kubelet tunnel: CONNECT %s refused: no node's kubelet is at that address", req.Host)
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	up, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		t.logf("kubelet tunnel: CONNECT %s: dial %s: %v", req.Host, target, err)
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	_ = c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
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
