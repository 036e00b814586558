package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// The API server reaches pods itself, not through kubelet: pods/proxy and
// services/proxy (`/api/v1/namespaces/NS/pods/NAME:PORT/proxy`) dial the
// pod's IP over the cluster network. The bed's API server runs on the
// host, outside the VM, so its egress selector sends that dial, like a
// kubelet's, as `CONNECT 10.244.1.4:80` to the KubeletTunnel. The tunnel
// routes a pod address to the kubelet API of the node whose pod CIDR holds
// it (a hostNetwork pod's, the node's own IP, to that node), and the node
// agent dials the pod from the node's network namespace, as the node's
// own traffic to its pods goes: what a route from the control plane to
// each node's pod CIDR does in a real cluster.

// ErrNotNodePod is returned by a PodDialer for an address that is not one
// of its node's pods (outside its pod CIDR and not its node IP).
var ErrNotNodePod = errors.New("not an address of this node's pods")

// PodDialer dials a TCP address of the node's pods from the node's network
// namespace: the node agent's side of the API server's pod proxy.
type PodDialer interface {
	DialPod(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

// connectTimeout bounds the dial of a pod and the CONNECT exchange.
const connectTimeout = 10 * time.Second

// serveConnect answers `CONNECT POD_IP:PORT`: the pod dialed from the
// node, 200, then bytes both ways until one side ends. A target that is
// not IP:PORT is 400, one not of this node's pods 403, a failed dial 502,
// each logged with the reason.
func (k *KubeletServer) serveConnect(w http.ResponseWriter, req *http.Request) {
	if k.rt.Dial == nil {
		k.refuse(w, req)
		return
	}
	addr, err := netip.ParseAddrPort(req.Host)
	if err != nil {
		k.logf("kubelet %s: CONNECT %q refused: the target must be a pod's IP:PORT: %v", k.node, req.Host, err)
		http.Error(w, fmt.Sprintf("CONNECT %q: the target must be a pod's IP:PORT", req.Host), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), connectTimeout)
	up, err := k.rt.Dial.DialPod(ctx, addr)
	cancel()
	if err != nil {
		k.logf("kubelet %s: CONNECT %s: %v", k.node, addr, err)
		code := http.StatusBadGateway
		if errors.Is(err, ErrNotNodePod) {
			code = http.StatusForbidden
		}
		http.Error(w, fmt.Sprintf("CONNECT %s from node %s: %v", addr, k.node, err), code)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		k.logf("kubelet %s: CONNECT %s: the connection cannot be taken over (HTTP/2?)", k.node, addr)
		http.Error(w, "CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		k.logf("kubelet %s: CONNECT %s: hijack: %v", k.node, addr, err)
		return
	}
	defer c.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(c, brw.Reader, up, up)
}

// dialThroughKubelet is the tunnel's side: a TLS connection to the kubelet
// API at kubelet (not verified, as the API server does not verify the
// bed's kubelets) and `CONNECT target` on it. It returns the connection
// and a reader holding what the kubelet sent after its 200.
func dialThroughKubelet(kubelet string, target netip.AddrPort) (net.Conn, *bufio.Reader, error) {
	raw, err := net.DialTimeout("tcp", kubelet, connectTimeout)
	if err != nil {
		return nil, nil, fmt.Errorf("dial kubelet %s: %w", kubelet, err)
	}
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // the bed's kubelets are self-signed and not verified, as by the API server
	_ = c.SetDeadline(time.Now().Add(connectTimeout))
	req := &http.Request{Method: http.MethodConnect, Host: target.String(), Header: http.Header{}}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s via kubelet %s: %w", target, kubelet, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s via kubelet %s: %w", target, kubelet, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = c.Close()
		return nil, nil, fmt.Errorf("CONNECT %s via kubelet %s: %s: %s", target, kubelet, resp.Status, msg)
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, nil
}

// splice copies a's reads (ar, which may hold bytes already buffered from
// a) to b and b's reads (br) to a, half-closing each direction when its
// source ends, and returns when both have ended.
func splice(a net.Conn, ar io.Reader, b net.Conn, br io.Reader) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, ar); closeWrite(b); done <- struct{}{} }()
	go func() { _, _ = io.Copy(a, br); closeWrite(a); done <- struct{}{} }()
	<-done
	<-done
}
