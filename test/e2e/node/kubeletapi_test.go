//go:build !kernel

package node_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
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
	kubelet, fwd, err := cluster.ForwardedKubelet(cluster.KubeletPort)
	if err != nil {
		t.Fatal(err)
	}
	guestPort := strconv.Itoa(cluster.KubeletPort)
	// The API server names the kubelet by the Node's Hostname address
	// (--hostname-override), else its InternalIP.
	routes := cluster.TunnelRoutes{Kubelets: map[string]string{
		net.JoinHostPort(node.NodeName, guestPort): kubelet,
		net.JoinHostPort(node.NodeIP, guestPort):   kubelet,
	}}
	tunnel, flag, err := cluster.StartEgressTunnel(routes, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tunnel.Close)
	return flag, fwd
}
