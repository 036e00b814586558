//go:build kernel

package deploy_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

const (
	imageNS       = "e2e-image"
	imageNodePort = 30080
	imagePodIP    = "10.244.0.5"
)

// cniRules are a CNI plugin's forwarding rules (family 4 or 6): what a node
// holds before its service proxy starts. On the nft node they are all it
// holds: no kubelet hint chain, so the wrapper must count rules, and must
// count the legacy ones without creating a legacy table.
func cniRules(podCIDR string) string {
	return "*filter\n:CNI-FORWARD - [0:0]\n-A FORWARD -j CNI-FORWARD\n" +
		"-A CNI-FORWARD -s " + podCIDR + " -j ACCEPT\n-A CNI-FORWARD -d " + podCIDR + " -j ACCEPT\nCOMMIT\n"
}

// kubeletChains are the chains kubelet 1.34 creates in the backend it uses.
const kubeletChains = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n" +
	"*nat\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n*filter\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"

// netfilterTables lists the node's tables of each backend, with readers that
// create nothing: /proc/net/ip{,6}_tables_names (the legacy tables that
// exist) and `nft list tables`.
func netfilterTables(t *testing.T, n *ktest.Node) (legacy, nft []string) {
	t.Helper()
	for _, f := range []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"} {
		out, err := n.Exec("cat", f) // missing: ip_tables never loaded, no table
		if err == nil {
			for _, name := range strings.Fields(out) {
				legacy = append(legacy, strings.TrimSuffix(strings.TrimPrefix(f, "/proc/net/"), "_tables_names")+" "+name)
			}
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(n.Run(t, "nft", "list", "tables")), "\n") {
		if l != "" {
			nft = append(nft, l)
		}
	}
	slices.Sort(legacy)
	slices.Sort(nft)
	return legacy, nft
}

// TestImageGuest runs, in the VM, the replace-kube-proxy overlay's pod from
// the image's root file system on two nodes, as the kubelet would (see
// container_kernel_test.go): the init containers, then `ipvs-proxy run
// --config=/var/lib/kube-proxy/config.conf` with kubeadm's config.conf and
// kubeconfig.conf and the kube-proxy ServiceAccount's token. One node's
// rules were written with iptables-nft (a CNI plugin's, no kubelet hint),
// the other's with iptables-legacy (the kubelet's hint chains and the same
// CNI rules). It checks:
//
//   - the image's modprobe loads a module from the mounted /lib/modules;
//   - each proxy syncs (/healthz 200) and a client's requests to the
//     ClusterIP and the NodePort reach the pod;
//   - the image's iptables wrapper put the proxy's rules in the node's own
//     backend, and no table of the other backend appeared.
func TestImageGuest(t *testing.T) {
	ctx := context.Background()
	b := readBundle(t, vmtest.GuestEnv(t, "IMAGE_BUNDLE"))
	var pods []*deploy.PodRun
	raw, err := os.ReadFile(vmtest.GuestEnv(t, "IMAGE_PODS"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &pods); err != nil {
		t.Fatal(err)
	}
	adminCfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "IMAGE_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(adminCfg)
	apiHostPort := strings.TrimPrefix(adminCfg.Host, "https://")
	_, apiPort, err := net.SplitHostPort(apiHostPort)
	if err != nil {
		t.Fatal(err)
	}

	hosts := map[string]nodeHost{}
	clients := map[string]*ktest.Client{}
	for _, p := range pods {
		n := ktest.NewNode(t)
		// kubeconfig.conf's server, https://127.0.0.1:PORT, as kubeadm's
		// control-plane endpoint: relayed to the host's API server.
		n.Relay(t, "127.0.0.1:"+apiPort, apiHostPort)
		n.AddPod(t, "pod-a", imagePodIP)
		clients[p.Node] = n.AddClient(t, "client")
		hosts[p.Node] = nodeHost{node: n, root: t.TempDir()}
	}
	nft, legacy := hosts[nftNode], hosts[legacyNode]
	nft.node.RunInput(t, cniRules("10.244.0.0/16"), "iptables-nft-restore", "--noflush")
	nft.node.RunInput(t, cniRules("fd00:10:244::/48"), "ip6tables-nft-restore", "--noflush")
	legacy.node.RunInput(t, kubeletChains+cniRules("10.244.0.0/16"), "iptables-legacy-restore", "--noflush")
	legacy.node.RunInput(t, kubeletChains+cniRules("fd00:10:244::/48"), "ip6tables-legacy-restore", "--noflush")
	type tables struct{ legacy, nft []string }
	before := map[string]tables{}
	for name, h := range hosts {
		l, n := netfilterTables(t, h.node)
		before[name] = tables{l, n}
		t.Logf("%s before the proxy: legacy tables %q, nf_tables %q", name, l, n)
	}

	// The image's modprobe, with the host's /lib/modules as the pod mounts it.
	var modMounts []deploy.Mount
	for _, m := range pods[0].Containers[0].Mounts {
		if m.Target == "/lib/modules" {
			modMounts = append(modMounts, m)
		}
	}
	mod := start(t, b, deploy.Container{Name: "modprobe", Argv: []string{"modprobe", "-v", "ip_vs_dh"}, Mounts: modMounts}, nft)
	if err := mod.wait(t, time.Minute); err != nil {
		t.Fatalf("the image's modprobe ip_vs_dh: %v\n%s", err, mod.output())
	}
	if mods, err := os.ReadFile("/proc/modules"); err != nil || !strings.Contains(string(mods), "ip_vs_dh ") {
		t.Errorf("ip_vs_dh not loaded after the image's modprobe (%v): %s", err, mod.output())
	}

	// The cluster: both Nodes, a NodePort Service, its endpoint.
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: imageNS}}, metav1.CreateOptions{}))
	for name := range hosts {
		must(client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ktest.NodeIPv4.String()}}}}, metav1.CreateOptions{}))
	}
	svc, err := client.CoreV1().Services(imageNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(ktest.BackendPort), NodePort: imageNodePort, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(client.DiscoveryV1().EndpointSlices(imageNS).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(int32(ktest.BackendPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{imagePodIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}}},
	}, metav1.CreateOptions{}))

	// The pods: init containers, then the proxy.
	proxies := map[string]*container{}
	started := map[string]time.Time{}
	for _, p := range pods {
		h := hosts[p.Node]
		runInit(t, b, p, h)
		if _, err := os.Stat(h.root + "/opt/ipvs-proxy/bin/ipvs-proxy"); err != nil {
			t.Errorf("%s: install-recovery-binary left no host binary: %v", p.Node, err)
		}
		started[p.Node] = time.Now()
		proxies[p.Node] = start(t, b, p.Containers[0], h)
	}
	ready := map[string]time.Duration{}
	for name, h := range hosts {
		ct := proxies[name]
		deadline := time.Now().Add(4 * time.Minute)
		for {
			code, _, err := h.node.HTTPGet("127.0.0.1:10256", "/healthz", 2*time.Second)
			if err == nil && code == 200 {
				ready[name] = time.Since(started[name])
				break
			}
			if !ct.running() || time.Now().After(deadline) {
				t.Fatalf("%s: no /healthz 200 (last %d %v; running %v):\n%s", name, code, err, ct.running(), tail(ct.output(), 60))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	for name, h := range hosts {
		cli := clients[name]
		for _, addr := range []string{net.JoinHostPort(svc.Spec.ClusterIP, "80"), net.JoinHostPort(ktest.NodeIPv4.String(), "30080")} {
			out, err := cli.Request(ktest.TCP, addr)
			if err != nil || !strings.HasPrefix(out, "pod-a ") {
				t.Errorf("%s: a client's request to %s: %q, %v; want pod-a's answer", name, addr, out, err)
			}
		}
		// The proxy's chains are in the node's backend, read with the
		// node's own tools.
		save := "iptables-nft-save"
		if name == legacyNode {
			save = "iptables-legacy-save"
		}
		if out := h.node.Run(t, save, "-t", "nat"); !strings.Contains(out, "-A KUBE-SERVICES") {
			t.Errorf("%s: %s -t nat has no KUBE-SERVICES rule: the proxy wrote to the other backend:\n%s", name, save, out)
		}
	}
	for name, h := range hosts {
		l, n := netfilterTables(t, h.node)
		t.Logf("%s with the proxy: legacy tables %q, nf_tables %q", name, l, n)
		if name == nftNode && !slices.Equal(l, before[name].legacy) {
			t.Errorf("%s: legacy tables %q appeared on an nft node (before: %q)", name, l, before[name].legacy)
		}
		if name == legacyNode && !slices.Equal(n, before[name].nft) {
			t.Errorf("%s: nf_tables tables %q appeared on a legacy node (before: %q)", name, n, before[name].nft)
		}
	}

	for name, ct := range proxies {
		_ = ct.cmd.Process.Signal(syscall.SIGTERM)
		if err := ct.wait(t, time.Minute); err != nil {
			t.Errorf("%s: ipvs-proxy run exited %v after SIGTERM", name, err)
		}
		if t.Failed() {
			t.Logf("%s proxy log:\n%s", name, tail(ct.output(), 80))
		}
	}
	t.Logf("IMAGE-REPORT: ready (/healthz 200 after start): %s %v, %s %v", nftNode, ready[nftNode].Round(time.Millisecond), legacyNode, ready[legacyNode].Round(time.Millisecond))
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
