//go:build kernel

package guard_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

const (
	vmNS     = "e2e-guard"
	vmNode   = "n1"
	resolver = "198.51.100.53"
	gateway  = "198.51.100.254"
	nextHop  = "198.51.100.253"
	peer     = "192.0.2.11" // the other end of the node's 192.0.2.10/31
	apiEP    = "198.51.100.40"
	deleted  = "198.51.100.30" // Node n3's address; n3 is deleted mid-test
	operator = "192.0.2.130"   // inside --protected-cidrs 192.0.2.128/25
	// listening is a port the node serves itself (a listener in the node
	// namespace), not in --protected-node-ports' default.
	listening = 7777
)

// hostileAddrs are the externalIPs a tenant asks for that the guard must
// never bind on kube-ipvs0, with the reason each refusal names. Node n2's
// addresses are written in the odd forms the API server accepts (a
// Hostname-type literal, 4in6, leading space, a zone, leading zeros), and
// the Service asks for their canonical form.
var hostileAddrs = map[string]string{
	ktest.NodeIPv4.String(): "", // served at L4 (default mode): a Warning, never bound
	gateway:                 "Gateway",
	nextHop:                 "Gateway",
	peer:                    "PointToPointPeer",
	resolver:                "Resolver",
	"198.51.100.255":        "Broadcast",
	"198.51.100.0":          "NetworkAddress",
	apiEP:                   "APIServer",
	operator:                "ProtectedCIDR",
	"198.51.100.20":         "NodeIP",
	"198.51.100.21":         "NodeIP",
	"198.51.100.22":         "NodeIP",
	"198.51.100.23":         "NodeIP",
	"198.51.100.24":         "NodeIP",
}

// benign are externalIPs nothing protects: they must be bound, which
// proves the monitor would have seen a protected one.
var benign = []string{"203.0.113.77", "203.0.113.78"}

// startGuestProxy runs `ipvs-proxy run` in the node namespace.
func startGuestProxy(t *testing.T, node *ktest.Node, bin, kubeconfig, stateDir string) *ktest.Process {
	t.Helper()
	return harness.StartProxy(t, node.NS, harness.Proxy{Bin: bin, Kubeconfig: kubeconfig, Node: vmNode, StateDir: stateDir,
		Flags: []string{"--protected-cidrs", "192.0.2.128/25"}})
}

// stopProxy sends SIGTERM and fails the test unless the proxy exits cleanly.
func stopProxy(t *testing.T, p *ktest.Process) {
	t.Helper()
	if _, err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("proxy after SIGTERM: %v", err)
	}
}

func bound(t *testing.T, node *ktest.Node) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, l := range strings.Split(node.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0"), "\n") {
		fs := strings.Fields(l)
		for i, f := range fs[:max(0, len(fs)-1)] {
			if f == "inet" || f == "inet6" {
				a, _, _ := strings.Cut(fs[i+1], "/")
				out[a] = true
			}
		}
	}
	return out
}

func vmSlice(svc string, addr string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmNS, Name: svc + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}, NodeName: ptr.To(vmNode),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(int32(ktest.BackendPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

func vmService(name string, externalIPs []string, ports ...int32) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{ExternalIPs: externalIPs}}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p,
			TargetPort: intstr.FromInt32(ktest.BackendPort), Protocol: corev1.ProtocolTCP})
	}
	return s
}

// TestGuardGuest runs in the VM (TestGuardVM): the hostile inputs of
// issue 14 through `ipvs-proxy run`, with `ip monitor address` on
// kube-ipvs0 from before the proxy starts to the end.
func TestGuardGuest(t *testing.T) {
	ctx := context.Background()
	env := func(k string) string { return vmtest.GuestEnv(t, k) }
	adminCfg, err := clientcmd.BuildConfigFromFlags("", env("GUARD_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(adminCfg)
	bin, proxyKC := env("GUARD_PROXY_BIN"), env("GUARD_KUBECONFIG_PROXY")
	apiHostPort := strings.TrimPrefix(adminCfg.Host, "https://")
	_, apiPort, _ := net.SplitHostPort(apiHostPort)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// The node: its LAN (eth0, 198.51.100.1/24), a default gateway and a
	// second next hop on it, a /31 uplink, a resolver, a port it serves.
	node := ktest.NewNode(t)
	pod := node.AddPod(t, "pod-a")
	podB := node.AddPod(t, "pod-b")
	node.AddClient(t, "cli")
	node.Run(t, "ip", "route", "add", "default", "via", gateway, "dev", "eth0")
	node.Run(t, "ip", "route", "add", "203.0.113.128/25", "via", nextHop, "dev", "eth0")
	node.Run(t, "ip", "link", "add", "uplink", "type", "dummy")
	node.Run(t, "ip", "addr", "add", "192.0.2.10/31", "dev", "uplink")
	node.Run(t, "ip", "link", "set", "uplink", "up")
	etcNetns := filepath.Join("/etc/netns", node.Name)
	if err := os.MkdirAll(etcNetns, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etcNetns) })
	if err := os.WriteFile(filepath.Join(etcNetns, "resolv.conf"), []byte("nameserver "+resolver+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := node.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", listening))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })

	nodeIP := ktest.NodeIPv4.String()
	must(client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: vmNS}}, metav1.CreateOptions{}))
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: vmNode}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "198.51.100.20"},
			{Type: corev1.NodeInternalIP, Address: "::ffff:198.51.100.21"},
			{Type: corev1.NodeExternalIP, Address: " 198.51.100.22"},
			{Type: corev1.NodeInternalDNS, Address: "198.51.100.23%eth0"},
			{Type: corev1.NodeExternalIP, Address: "198.051.100.024"},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n3"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: deleted}}}},
	} {
		must(client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}))
	}
	// The API server's endpoint as its endpoint reconciler writes it (this
	// server runs with --endpoint-reconciler-type=none).
	must(client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{apiEP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(6443)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{}))

	// Startup: an earlier proxy left protected addresses on kube-ipvs0, and
	// the API server is not reachable yet (no relay): the startup pass
	// removes them before any cache syncs.
	node.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	left := []string{nodeIP, gateway, peer, operator}
	for _, a := range left {
		node.Run(t, "ip", "addr", "add", a+"/32", "dev", "kube-ipvs0")
	}
	ipvs0, err := node.Netlink(t).LinkByName("kube-ipvs0")
	if err != nil {
		t.Fatal(err)
	}
	mon := node.MonitorAddrs(t, ipvs0.Attrs().Index)
	stateDir := t.TempDir()
	p := startGuestProxy(t, node, bin, proxyKC, stateDir)
	harness.WaitUntil(t, "the protected addresses left on kube-ipvs0 to go with the API server unreachable", 2*time.Minute, 100*time.Millisecond, func() bool {
		now := bound(t, node)
		return !slices.ContainsFunc(left, func(a string) bool { return now[a] })
	})
	if p.OutputHas("informer caches synced") {
		t.Fatal("the informer caches synced with no route to the API server")
	}
	node.Relay(t, "127.0.0.1:"+apiPort, apiHostPort)

	// The tenant's Services.
	hostile := slices.Sorted(func(yield func(string) bool) {
		for a := range hostileAddrs {
			if !yield(a) {
				return
			}
		}
	})
	// Port 81: the node's address serves 80 for Service ports below.
	must(client.CoreV1().Services(vmNS).Create(ctx, vmService("hostile", append(slices.Clone(hostile), benign[0]), 81), metav1.CreateOptions{}))
	ports := vmService("ports", []string{nodeIP}, 80, 22, 10250, listening)
	must(client.CoreV1().Services(vmNS).Create(ctx, ports, metav1.CreateOptions{}))
	forged := vmService("forged", nil, 80)
	forged.Annotations = map[string]string{"ipvs-proxy.io/scheduler": "rr\n# kube-ipvs0\n10.0.0.1/32"}
	must(client.CoreV1().Services(vmNS).Create(ctx, forged, metav1.CreateOptions{}))
	var many []string
	for i := 0; i < 1100; i++ {
		many = append(many, fmt.Sprintf("100.64.%d.%d", i/200, 1+i%200))
	}
	must(client.CoreV1().Services(vmNS).Create(ctx, vmService("amplify", many, 80), metav1.CreateOptions{}))
	for _, s := range []string{"hostile", "ports", "forged", "amplify"} {
		must(client.DiscoveryV1().EndpointSlices(vmNS).Create(ctx, vmSlice(s, pod.Addrs[0].String()), metav1.CreateOptions{}))
	}
	harness.WaitUntil(t, benign[0]+" bound", 3*time.Minute, 100*time.Millisecond, func() bool { return bound(t, node)[benign[0]] })

	// A Node deleted: its address stays protected (the grace period),
	// including for a Service created after the deletion.
	if err := client.CoreV1().Nodes().Delete(ctx, "n3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	must(client.CoreV1().Services(vmNS).Create(ctx, vmService("after-delete", []string{deleted, benign[1]}, 80), metav1.CreateOptions{}))
	must(client.DiscoveryV1().EndpointSlices(vmNS).Create(ctx, vmSlice("after-delete", pod.Addrs[0].String()), metav1.CreateOptions{}))
	harness.WaitUntil(t, benign[1]+" bound", time.Minute, 100*time.Millisecond, func() bool { return bound(t, node)[benign[1]] })

	// A Node joins with an address a Service has bound: the Services that
	// name it are planned again, not every Service (Reguard), and the
	// address leaves kube-ipvs0 with its virtual server.
	must(client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n4"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: benign[1]}}}}, metav1.CreateOptions{}))
	harness.WaitUntil(t, benign[1]+" unbound once Node n4 has it", time.Minute, 100*time.Millisecond, func() bool { return !bound(t, node)[benign[1]] })
	if !p.OutputHas("planning again only the services that name an address whose protection changed") {
		t.Error("Node n4 joined, and the proxy did not take it service by service (no Reguard line in its log)")
	}
	if save := node.Run(t, "ipvsadm", "-S", "-n"); strings.Contains(save, "-A -t "+benign[1]+":80 ") {
		t.Errorf("%s:80, now Node n4's address, still served:\n%s", benign[1], save)
	}
	round3(ctx, t, client, node, pod, podB)

	// Two full syncs (--sync-period 5s) read the kernel and repair it.
	time.Sleep(11 * time.Second)
	if !p.Alive() {
		t.Fatal("the proxy exited")
	}

	// IPVS: the node's address serves port 80 at L4 but never a port the
	// node serves itself; the amplifying Service is capped.
	save := node.Run(t, "ipvsadm", "-S", "-n")
	if !strings.Contains(save, "-A -t "+nodeIP+":80 ") {
		t.Errorf("%s:80 is not served (default mode serves a node address at L4):\n%s", nodeIP, save)
	}
	for _, port := range []int{22, 10250, listening} {
		if strings.Contains(save, fmt.Sprintf("-A -t %s:%d ", nodeIP, port)) {
			t.Errorf("%s:%d, a port the node serves itself, captured by a Service", nodeIP, port)
		}
	}
	amplified := strings.Count(save, "-A -t 100.64.")
	if amplified != 1000 {
		t.Errorf("the 1,100-externalIP Service has %d virtual servers, want the cap of 1,000", amplified)
	}

	// Warning Events name each refusal's reason.
	reasons := map[string][]string{}
	harness.WaitUntil(t, "Events for every hostile address", time.Minute, 100*time.Millisecond, func() bool {
		evs, err := client.CoreV1().Events(vmNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		clear(reasons)
		for _, e := range evs.Items {
			if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Service" {
				continue
			}
			for _, a := range append(slices.Clone(hostile), deleted, benign[1]) {
				if strings.Contains(e.Message, a+" ") || strings.Contains(e.Message, a+":") {
					reasons[a] = append(reasons[a], e.Reason)
				}
			}
			if e.InvolvedObject.Name == "ports" || e.InvolvedObject.Name == "amplify" || e.InvolvedObject.Name == "forged" {
				reasons[e.InvolvedObject.Name] = append(reasons[e.InvolvedObject.Name], e.Reason)
			}
		}
		return len(reasons) == len(hostile)+5
	})
	want := map[string]string{deleted: "NodeIP", benign[1]: "NodeIP", "ports": "NodeServicePort", "amplify": "TooManyVirtualServers", "forged": "UnknownScheduler"}
	for a, r := range hostileAddrs {
		if r != "" {
			want[a] = r
		}
	}
	for k, r := range want {
		if !slices.Contains(reasons[k], r) {
			t.Errorf("%s: Events with reasons %v, want %s", k, reasons[k], r)
		}
	}

	// Restart with what an earlier proxy left: the deleted Node's address
	// and the node's own on kube-ipvs0. The node address cache in the
	// state directory remembers n3, so the startup pass removes both
	// before the informers sync.
	stopProxy(t, p)
	node.Run(t, "ip", "addr", "add", deleted+"/32", "dev", "kube-ipvs0")
	node.Run(t, "ip", "addr", "add", nodeIP+"/32", "dev", "kube-ipvs0")
	p2 := startGuestProxy(t, node, bin, proxyKC, stateDir)
	harness.WaitUntil(t, "the restarted proxy's startup guard pass", 2*time.Minute, 100*time.Millisecond, func() bool { return p2.OutputHas("startup guard pass done") })
	if !p2.OutputHas(`"address": "` + deleted + `/32"`) {
		t.Errorf("the startup pass did not remove the deleted Node's %s (log has no removal line for it)", deleted)
	}
	harness.WaitUntil(t, "the restarted proxy's first full sync", 2*time.Minute, 100*time.Millisecond, func() bool { return p2.OutputHas(`"mode": "full"`) })
	now := bound(t, node)
	for _, a := range append(slices.Clone(hostile), deleted, benign[1]) {
		if now[a] {
			t.Errorf("protected %s on kube-ipvs0 after the restart", a)
		}
	}
	stopProxy(t, p2)

	// The monitor, from before the first start to now: the only protected
	// addresses ever added are the two this test added itself before the
	// restart (once each).
	protected := map[string]bool{deleted: true, round3PodIP: true, "168.63.129.16": true}
	for a := range hostileAddrs {
		protected[a] = true
	}
	got := mon.Stop()
	var seen []string
	for _, p := range got {
		if a := p.Addr().String(); protected[a] {
			seen = append(seen, a)
		}
	}
	slices.Sort(seen)
	if want := slices.Sorted(slices.Values([]string{nodeIP, deleted})); !slices.Equal(seen, want) {
		t.Errorf("protected addresses added to kube-ipvs0 (monitor): %v, want only the test's own %v", seen, want)
	}
	t.Logf("GUARD-VM-REPORT: %d addresses added to kube-ipvs0 in all, %d hostile externalIPs refused, 1,100-address Service capped at %d virtual servers, reasons %v",
		len(got), len(hostile)+1, amplified, reasons)
}

// round3PodIP is a pod's address in Node n6's spec.podCIDRs, outside
// --cluster-cidr: a tenant asks for it as an externalIP (issue 37).
const round3PodIP = "100.65.9.53"

// round3 is issue 37 through `run` with real traffic from the node: a
// Node's claim on a ClusterIP protects nothing (the Service answers), a
// Node's pod range is never a VIP, the oldest Service keeps its
// externalIP:port against a newcomer named to sort first, an externalIP
// that is another Service's LoadBalancer IP is refused on every port, and
// a cloud platform address, a Service VIP (a ClusterIP, an externalIP) or
// this node's address at a protected node port in a hand-written slice is
// never a real server while the slice's pod is.
func round3(ctx context.Context, t *testing.T, client kubernetes.Interface, node *ktest.Node, pod, podB *ktest.Pod) {
	t.Helper()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	create := func(svc *corev1.Service, backend string, more ...string) *corev1.Service {
		t.Helper()
		got, err := client.CoreV1().Services(vmNS).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl := vmSlice(svc.Name, backend)
		sl.Ports[0].Name = ptr.To(svc.Spec.Ports[0].Name) // matched to the Service's port by name
		for _, a := range more {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		must(client.DiscoveryV1().EndpointSlices(vmNS).Create(ctx, sl, metav1.CreateOptions{}))
		return got
	}
	answers := func(addr, want string) bool {
		out, err := node.Request(ktest.TCP, addr)
		return err == nil && strings.HasPrefix(out, want+" ")
	}
	podA, podBAddr := pod.Addrs[0].String(), podB.Addrs[0].String()

	// Item 1: Node n5 claims the ClusterIP of "trusted" after it answers.
	trusted := create(vmService("trusted", nil, 80), podA)
	cip := trusted.Spec.ClusterIP + ":80"
	harness.WaitUntil(t, "trusted's ClusterIP answering", time.Minute, 100*time.Millisecond, func() bool { return answers(cip, "pod-a") })
	must(client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n5"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: trusted.Spec.ClusterIP}}}}, metav1.CreateOptions{}))
	// Item 3: Node n6's pod range, outside --cluster-cidr.
	must(client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n6"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"100.65.9.0/24"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.26"}}}}, metav1.CreateOptions{}))
	create(vmService("pod-ip", []string{round3PodIP, "203.0.113.91"}, 80), podA)
	// Item 4: old-web first, the newcomer aaa-new a second later.
	create(vmService("old-web", []string{"203.0.113.90"}, 80), podA)
	time.Sleep(1100 * time.Millisecond)
	create(vmService("aaa-new", []string{"203.0.113.90"}, 80), podBAddr)
	// Item 6: a slice naming a cloud platform address, trusted's ClusterIP
	// and old-web's externalIP beside pod-b; a second slice of the same
	// port naming this node's address at port 22 (--protected-node-ports).
	eps := create(vmService("eps", nil, 80), podBAddr, "168.63.129.16", trusted.Spec.ClusterIP, "203.0.113.90")
	sshSlice := vmSlice("eps", ktest.NodeIPv4.String())
	sshSlice.Name, sshSlice.Ports[0].Name, sshSlice.Ports[0].Port = "eps-ssh", ptr.To(eps.Spec.Ports[0].Name), ptr.To(int32(22))
	must(client.DiscoveryV1().EndpointSlices(vmNS).Create(ctx, sshSlice, metav1.CreateOptions{}))
	// Item 5: lb's LoadBalancer IP, written through the status subresource
	// as its controller would, is lb-steal's externalIP on port 81.
	lb := vmService("lb", nil, 80)
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	lb = create(lb, podA)
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.95"}}
	must(client.CoreV1().Services(vmNS).UpdateStatus(ctx, lb, metav1.UpdateOptions{}))
	create(vmService("lb-steal", []string{"203.0.113.95"}, 81), podBAddr)

	harness.WaitUntil(t, "the round-three Services planned", time.Minute, 100*time.Millisecond, func() bool {
		return bound(t, node)["203.0.113.91"] && answers(eps.Spec.ClusterIP+":80", "pod-b") && answers("203.0.113.95:80", "pod-a")
	})
	time.Sleep(6 * time.Second) // a full sync (--sync-period 5s) with n5 and n6
	if !answers(cip, "pod-a") || !bound(t, node)[trusted.Spec.ClusterIP] {
		t.Errorf("Node n5's claim unprogrammed trusted's ClusterIP %s", cip)
	}
	if bound(t, node)[round3PodIP] {
		t.Errorf("%s, inside Node n6's spec.podCIDRs, bound", round3PodIP)
	}
	for range 5 {
		if !answers("203.0.113.90:80", "pod-a") {
			t.Errorf("203.0.113.90:80 not served by old-web's pod-a: the newcomer aaa-new took it")
			break
		}
	}
	for range 6 {
		if !answers(eps.Spec.ClusterIP+":80", "pod-b") {
			t.Errorf("eps' ClusterIP not answered by its pod-b alone")
			break
		}
	}
	if _, err := node.Request(ktest.TCP, "203.0.113.95:81"); err == nil {
		t.Errorf("203.0.113.95:81, lb's LoadBalancer IP as lb-steal's externalIP, answered")
	}
	save := node.Run(t, "ipvsadm", "-S", "-n")
	backend := ":" + fmt.Sprint(ktest.BackendPort)
	for _, bad := range []string{"168.63.129.16" + backend, trusted.Spec.ClusterIP + backend, "203.0.113.90" + backend, ktest.NodeIPv4.String() + ":22"} {
		if strings.Contains(save, "-r "+bad+" ") {
			t.Errorf("real server %s programmed:\n%s", bad, save)
		}
	}
	if strings.Contains(save, "-A -t 203.0.113.95:81 ") {
		t.Errorf("lb-steal has lb's LoadBalancer IP 203.0.113.95 on port 81:\n%s", save)
	}
	if !strings.Contains(save, "-r "+podBAddr+backend) {
		t.Errorf("eps' pod %s is no real server:\n%s", podBAddr, save)
	}
}
