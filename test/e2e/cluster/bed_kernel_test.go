//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// The bed's addresses: one LAN (a bridge in its own namespace) holding
// the nodes' eth0 and the runner, pod CIDRs routed host-gw style.
var (
	lanPrefix   = netip.MustParsePrefix("192.168.50.0/24")
	runnerIP    = netip.MustParseAddr("192.168.50.100")
	clusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	nodeNames   = cluster.NodeNames
)

// hostRootMount is where upstream's hostexec pods mount the node's root.
const hostRootMount = "/rootfs"

// bedNode is one node: its namespace on the LAN, its Node object, its
// `ipvs-proxy run` and its agent.
type bedNode struct {
	name    string
	index   int // in nodeNames: names its kubelet port (cluster.GuestKubeletPort)
	ns      *ktest.Node
	ip      netip.Addr
	podCIDR netip.Prefix
	agent   *agent
	proxy   *proxyProc
	// restarts counts restartProxy's restarts (names their logs).
	restarts int
	// stopRelay cuts the node off from the API server (the relay to it).
	stopRelay func()
}

// bed is the cluster: three nodes and the runner (the upstream tests'
// external client) on one LAN.
type bed struct {
	client kubernetes.Interface
	cfg    *rest.Config // the admin's, for exec
	lan    *ktest.NS
	nodes  []*bedNode
	runner *ktest.NS
	// t is TestClusterGuest's: what outlives one subtest (a restarted
	// proxy) is cleaned up with it.
	t *testing.T
	// proxyBin and proxyKC are the proxies' binary and kubeconfig.
	proxyBin, proxyKC string
	// apiPort and apiHostPort: the API server as the nodes reach it
	// (127.0.0.1:apiPort, relayed to apiHostPort).
	apiPort, apiHostPort string
	// upstreamDir, when set (CLUSTER_UPSTREAM_DIR), holds upstream's
	// e2e.test, kubectl and agnhost: the agents run containers as real
	// processes and the upstream e2e.test subtest runs.
	upstreamDir string
	// dns: the bed runs cluster DNS (CLUSTER_COREDNS_BIN, startClusterDNS).
	dns bool
}

// newBed builds the cluster in the VM from the host test's environment
// and returns once every node's proxy has synced.
func newBed(t *testing.T) *bed {
	t.Helper()
	start := time.Now()
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "CLUSTER_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	proxyBin, proxyKC := vmtest.GuestEnv(t, "CLUSTER_PROXY_BIN"), vmtest.GuestEnv(t, "CLUSTER_KUBECONFIG_PROXY")
	apiHostPort := strings.TrimPrefix(cfg.Host, "https://")
	_, apiPort, _ := net.SplitHostPort(apiHostPort)
	b := &bed{client: kubernetes.NewForConfigOrDie(cfg), cfg: cfg, t: t, proxyBin: proxyBin, proxyKC: proxyKC,
		apiPort: apiPort, apiHostPort: apiHostPort, upstreamDir: os.Getenv("CLUSTER_UPSTREAM_DIR")}
	if b.upstreamDir != "" {
		// The agnhost image's entrypoint, for containers and exec alike
		// (the VM's root is a writable overlay).
		if err := os.Symlink(filepath.Join(b.upstreamDir, "agnhost"), cluster.AgnhostEntrypoint); err != nil {
			t.Fatalf("upstream bed: %v", err)
		}
		// A hostexec pod's hostPath volume "/" at /rootfs (its exec runs
		// `nsenter --mount=/rootfs/proc/1/ns/mnt`): the VM's root is the
		// node's.
		if err := os.Symlink("/", hostRootMount); err != nil {
			t.Fatalf("upstream bed: %v", err)
		}
		// sctp.ko loads on a node's first SCTP socket, as on a real node,
		// not with the test's kernel modules: upstream's basic SCTP
		// Service spec (SN-101) checks the proxy never loads it.
		ktest.Modules = slices.DeleteFunc(slices.Clone(ktest.Modules), func(m string) bool { return m == "sctp" })
	}

	lan, err := ktest.NewNamespace("lan")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lan.Close)
	b.lan = lan
	lh := lan.Netlink(t)
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := lh.LinkAdd(br); err != nil {
		t.Fatalf("lan: ip link add br0 type bridge: %v", err)
	}
	if err := lh.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}

	for i, name := range nodeNames {
		n := &bedNode{name: name, index: i, ns: ktest.NewNode(t),
			ip: cluster.NodeIP(i), podCIDR: cluster.NodePodCIDR(i)}
		plugIntoLAN(t, lh, n.ns.NS, "lan-"+name, netip.PrefixFrom(n.ip, lanPrefix.Bits()))
		b.nodes = append(b.nodes, n)
	}
	// host-gw: each node routes the others' pod CIDRs via their node IPs.
	for _, n := range b.nodes {
		for _, o := range b.nodes {
			if o != n {
				n.ns.Run(t, "ip", "route", "add", o.podCIDR.String(), "via", o.ip.String(), "dev", "eth0")
			}
		}
	}
	runner, err := ktest.NewNamespace("runner")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runner.Close)
	plugIntoLAN(t, lh, runner, "lan-runner", netip.PrefixFrom(runnerIP, lanPrefix.Bits()))
	b.runner = runner
	if b.upstreamDir != "" {
		b.plugAPIServer(t, lh)
	}

	for _, n := range b.nodes {
		if _, err := cluster.RegisterNode(ctx, b.client, cluster.NodeObject(n.name, n.ip.String(), n.podCIDR.String(), cluster.KubeletPort)); err != nil {
			t.Fatal(err)
		}
		// The proxy dials the API server at 127.0.0.1:PORT in its node.
		n.stopRelay = n.ns.Relay(t, "127.0.0.1:"+apiPort, apiHostPort)
		n.agent = startAgent(t, b.client, n, b.upstreamDir != "")
		n.proxy = startProxy(t, n, proxyBin, proxyKC)
	}
	for _, n := range b.nodes {
		n.proxy.waitSynced(t, 3*time.Minute)
	}
	if bin := os.Getenv("CLUSTER_COREDNS_BIN"); bin != "" {
		b.startClusterDNS(t, bin)
	}
	t.Logf("bed up: 3 nodes, their proxies synced, in %v", time.Since(start).Round(time.Millisecond))
	return b
}

// plugIntoLAN is `ip link add NAME type veth peer eth0 netns NS; ip link set
// NAME master br0; ip -n NS addr add ADDR dev eth0`.
func plugIntoLAN(t *testing.T, lh *netlink.Handle, ns *ktest.NS, name string, addr netip.Prefix) {
	t.Helper()
	peer := "p" + name
	if err := lh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
		t.Fatalf("lan: ip link add %s type veth: %v", name, err)
	}
	host, err := lh.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	br, err := lh.LinkByName("br0")
	if err != nil {
		t.Fatal(err)
	}
	if err := lh.LinkSetMaster(host, br); err != nil {
		t.Fatalf("lan: ip link set %s master br0: %v", name, err)
	}
	if err := lh.LinkSetUp(host); err != nil {
		t.Fatal(err)
	}
	p, err := lh.LinkByName(peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := lh.LinkSetNsFd(p, int(ns.Handle())); err != nil {
		t.Fatalf("lan: ip link set %s netns %s: %v", peer, ns.Name, err)
	}
	nh := ns.Netlink(t)
	p, err = nh.LinkByName(peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := nh.LinkSetName(p, "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := nh.AddrAdd(p, &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}}); err != nil {
		t.Fatalf("%s: ip addr add %s dev eth0: %v", ns.Name, addr, err)
	}
	if err := nh.LinkSetUp(p); err != nil {
		t.Fatal(err)
	}
}

// node returns the bed's node called name.
func (b *bed) node(t *testing.T, name string) *bedNode {
	t.Helper()
	for _, n := range b.nodes {
		if n.name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// String names the bed for logs.
func (b *bed) String() string {
	var s []string
	for _, n := range b.nodes {
		s = append(s, fmt.Sprintf("%s %s pods %s", n.name, n.ip, n.podCIDR))
	}
	return strings.Join(s, "; ")
}

// plugAPIServer puts the API server on the LAN at the address it
// advertises (cluster.APIServerIP, its secure port): a namespace relaying
// that address to the host, with routes back to the pod CIDRs via their
// nodes, so the kubernetes Service's endpoint answers pods as a control
// plane node's would.
func (b *bed) plugAPIServer(t *testing.T, lh *netlink.Handle) {
	t.Helper()
	api, err := ktest.NewNamespace("apiserver")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	plugIntoLAN(t, lh, api, "lan-api", netip.PrefixFrom(cluster.APIServerIP, lanPrefix.Bits()))
	for _, n := range b.nodes {
		api.Run(t, "ip", "route", "add", n.podCIDR.String(), "via", n.ip.String(), "dev", "eth0")
	}
	api.Relay(t, net.JoinHostPort(cluster.APIServerIP.String(), b.apiPort), b.apiHostPort)
}
