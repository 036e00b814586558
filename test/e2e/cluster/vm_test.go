//go:build !kernel

package cluster_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// TestClusterVM is the multi-node bed: the API server and Kubernetes'
// controllers on the host, three nodes each running `ipvs-proxy run` and
// a node agent in the VM (TestClusterGuest), and the re-created upstream
// tests on them. It runs when asked (CLUSTER=1, which `make conformance`
// and `make test-conformance` set); CLUSTER_RUN narrows the guest's
// subtests (a -test.run pattern under TestClusterGuest) and CLUSTER_SKIP
// leaves some out (a -test.skip pattern, TestClusterGuest/NAME).
func TestClusterVM(t *testing.T) {
	if os.Getenv("CLUSTER") != "1" {
		t.Skip("the cluster bed runs under `make conformance` (CLUSTER=1): one VM boot, minutes")
	}
	// make conformance (every test) takes about 25 min on a loaded host.
	timeout := 32 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	// The API server reaches each node's kubelet API (exec) through its
	// egress selector, the KubeletTunnel, and a qemu host forward.
	kubelets, forwards := kubeletForwards(t)
	tunnel, egress, err := cluster.StartEgressTunnel(kubelets, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer tunnel.Close()
	flags := []string{egress}
	if os.Getenv("CLUSTER_UPSTREAM_DIR") != "" {
		// The kubernetes Service gets its endpoint, as upstream's
		// `EndpointSlice ... pointing to API Server` expects: the API
		// server's secure port at an address the guest relays to it.
		flags = append(flags, "--endpoint-reconciler-type=lease", "--advertise-address="+cluster.APIServerIP.String())
	}
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: flags})
	ctrl, err := cluster.StartControllers(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	sched, err := cluster.StartScheduler(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()
	cidrs, err := cluster.StartServiceCIDRs(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer cidrs.Stop()
	if os.Getenv("CLUSTER_UPSTREAM_DIR") != "" {
		// The upstream tests make pods through Deployments and
		// ReplicationControllers and expect a deleted object's dependents
		// to go; the re-created ones do not.
		work, err := cluster.StartWorkloads(ctx, srv.Config(), srv.CAData)
		if err != nil {
			t.Fatal(err)
		}
		defer work.Stop()
		gc, err := cluster.StartGarbageCollector(ctx, srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		defer gc.Stop()
		// SN-42/43 roll a DaemonSet's pods through a load balancer.
		dsc, err := cluster.StartDaemonSets(ctx, srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		defer dsc.Stop()
	}

	dir := t.TempDir()
	guestKC, proxyKC := filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	// Each proxy dials 127.0.0.1:PORT in its node namespace, relayed to
	// the host by the guest.
	if err := srv.WriteKubeconfig(proxyKC, srv.Config(), srv.URL); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	proxyBin := os.Getenv("IPVS_PROXY_BIN")
	if proxyBin == "" {
		proxyBin = gobuild.Proxy(t, dir)
	}
	guestBin := gobuild.GuestTest(t, dir, "cluster")

	run := "^TestClusterGuest$"
	if sub := os.Getenv("CLUSTER_RUN"); sub != "" {
		run += "/" + sub
	}
	args := []string{"-test.v", "-test.run", run, "-test.timeout", timeout.String()}
	if skip := os.Getenv("CLUSTER_SKIP"); skip != "" {
		args = append(args, "-test.skip", skip)
	}
	env := []string{"CLUSTER_KUBECONFIG_ADMIN=" + guestKC, "CLUSTER_KUBECONFIG_PROXY=" + proxyKC,
		"CLUSTER_PROXY_BIN=" + proxyBin, boomServer(t, dir)}
	// `make conformance-upstream`: upstream's e2e.test on the bed, with
	// cluster DNS (tools/coredns).
	for _, k := range []string{"CLUSTER_UPSTREAM_DIR", "CLUSTER_UPSTREAM_FOCUS", "CLUSTER_UPSTREAM_FOCUS_2", "CLUSTER_UPSTREAM_SKIP", "CLUSTER_COREDNS_BIN"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	res, err := vmtest.Run(ctx, vmtest.Config{
		Jobs:         []vmtest.Job{{Bin: guestBin, Args: args, Dir: wd}},
		Env:          env,
		ForwardPort:  srv.Port,
		HostForwards: forwards,
		Timeout:      timeout + 2*time.Minute,
		FailOnSkip:   true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM boot %v, total %v", res.Boot, res.Total)
}

// kubeletForwards picks a free host port for each bed node's kubelet API:
// the tunnel's routes (NODE:10250, as the API server names the kubelet by
// the Node's Hostname address and kubelet port, to 127.0.0.1:HOSTPORT;
// the node's pod CIDR and node IP, for the API server's pod proxy, to the
// same) and qemu's host forwards (HOSTPORT to the agent's port in the
// guest).
func kubeletForwards(t *testing.T) (cluster.TunnelRoutes, []vmtest.HostForward) {
	t.Helper()
	routes := cluster.TunnelRoutes{Kubelets: map[string]string{}}
	var forwards []vmtest.HostForward
	for i, name := range cluster.NodeNames {
		kubelet, fwd, err := cluster.ForwardedKubelet(cluster.GuestKubeletPort(i))
		if err != nil {
			t.Fatal(err)
		}
		routes.Kubelets[net.JoinHostPort(name, strconv.Itoa(cluster.KubeletPort))] = kubelet
		routes.Pods = append(routes.Pods, cluster.PodRoute{Prefix: cluster.NodePodCIDR(i), Kubelet: kubelet},
			cluster.PodRoute{Prefix: netip.PrefixFrom(cluster.NodeIP(i), 32), Kubelet: kubelet})
		forwards = append(forwards, fwd)
	}
	return routes, forwards
}
