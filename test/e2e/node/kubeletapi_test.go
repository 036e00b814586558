//go:build !kernel

package node_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// kubeletAPI lets the host's API server reach the guest kubelet's API
// (logs, exec), as a control plane reaches its nodes': its egress selector
// sends `CONNECT node-a:10250` to a cluster.KubeletTunnel, which dials the
// host port qemu forwards to the kubelet's port in the guest. It returns
// the API server's flag and that forward; the tunnel closes with t.
func kubeletAPI(t *testing.T) (flag string, fwd vmtest.HostForward) {
	t.Helper()
	// A short path: a Unix socket's name has at most 107 bytes.
	dir, err := os.MkdirTemp("", "nk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock, egress := filepath.Join(dir, "tunnel.sock"), filepath.Join(dir, "egress.yaml")
	if err := os.WriteFile(egress, cluster.EgressSelectorConfig(sock), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	kubelet := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	guestPort := strconv.Itoa(cluster.KubeletPort)
	// The API server names the kubelet by the Node's Hostname address
	// (--hostname-override), else its InternalIP.
	routes := cluster.TunnelRoutes{Kubelets: map[string]string{
		net.JoinHostPort(node.NodeName, guestPort): kubelet,
		net.JoinHostPort(node.NodeIP, guestPort):   kubelet,
	}}
	tunnel, err := cluster.StartKubeletTunnel(sock, routes, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tunnel.Close)
	return "--egress-selector-config-file=" + egress, vmtest.HostForward{HostPort: port, GuestPort: cluster.KubeletPort}
}
