//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// servicesMore are the checklist's other Services tests (service.go,
// networking.go, no_snat.go) the bed runs cheaply.
func (b *bed) servicesMore(t *testing.T) {
	t.Run("should be able to up and down services", b.upAndDown)
	t.Run("should work after the service has been recreated", b.recreated)
	t.Run("should be rejected when no endpoints exist", b.rejectedNoEndpoints)
	t.Run("should implement service.kubernetes.io/service-proxy-name", b.serviceProxyName)
	t.Run("should implement service.kubernetes.io/headless", b.headlessLabel)
	t.Run("should be updated after adding or deleting ports", b.addDeletePorts)
	t.Run("should be able to update service type to NodePort listening on same port number but different protocols", b.nodePortBothProtocols)
	t.Run("should release NodePorts on delete", b.releaseNodePorts)
	t.Run("Should be able to send traffic between Pods without SNAT", b.noSNAT)
	t.Run("should check kube-proxy urls", b.kubeProxyURLs)
	t.Run("should be possible to connect to a service via ExternalIP when the external IP is not assigned to a node", b.externalIPNotANode)
	t.Run("should serve endpoints on same port and different protocol for internal traffic on Type LoadBalancer", b.lbTypeBothProtocols)
	t.Run("should set TCP CLOSE_WAIT timeout [Privileged]", b.closeWaitTimeout)
}

// closeWaitTimeout is SN-116 (kube_proxy.go): a server in node-b's
// namespace on 11302 closes each connection at once; a pod on node-a
// connects and keeps its end open, so the flow sits in CLOSE_WAIT; node-a's
// conntrack entry for it must carry a timeout within 60 s of 3600
// (the proxy's nf_conntrack_tcp_timeout_close_wait, 1 h).
func (b *bed) closeWaitTimeout(t *testing.T) {
	ns := b.testNamespace(t, "close-wait")
	nodeB := b.node(t, "node-b")
	var ln net.Listener
	if err := nodeB.ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ":11302")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	client := b.execPod(t, ns, "node-a")
	var conn net.Conn
	if err := client.ns.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(nodeB.ip, 11302).String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	nh := b.node(t, "node-a").ns.Netlink(t)
	eventually(t, "node-a's conntrack entry of the CLOSE_WAIT flow times out in about 3600 s", time.Minute, func() error {
		flows, err := nh.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, f := range flows {
			if f.Forward.DstPort == 11302 && f.Forward.SrcIP.Equal(client.ip.AsSlice()) {
				if f.TimeOut < 3600-60 || f.TimeOut > 3600 {
					return fmt.Errorf("timeout %d s: %s", f.TimeOut, f)
				}
				return nil
			}
		}
		return fmt.Errorf("no conntrack entry %s -> %s:11302 among %d", client.ip, nodeB.ip, len(flows))
	})
}

// externalIPNotANode is SN-31: a ClusterIP Service with externalIPs
// [203.0.113.250] (no node's address); from a pod the VIP and the
// external IP reach both pods.
func (b *bed) externalIPNotANode(t *testing.T) {
	ns := b.testNamespace(t, "externalip")
	sel := map[string]string{"app": "externalip-test"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "externalip-test"},
		Spec: corev1.ServiceSpec{Selector: sel, ExternalIPs: []string{"203.0.113.250"},
			Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(9376))}}})
	_, names := b.runPods(t, ns, "externalip-test", sel, 9376, 0, "node-a", "node-b")
	exec := b.execPod(t, ns, "node-c")
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), names)
	reachesAll(t, "execpod", exec.ns, netip.MustParseAddrPort("203.0.113.250:80"), names)
}

// lbTypeBothProtocols is SN-48: a LoadBalancer Service (no ingress) with
// 80/TCP -> named svc1 and 80/UDP -> named svc2, one pod serving both on
// 100: the VIP answers over TCP and UDP.
func (b *bed) lbTypeBothProtocols(t *testing.T) {
	ns := b.testNamespace(t, "lb-internal-protocols")
	sel := map[string]string{"app": "multiprotocol-test"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "multiprotocol-test"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: sel, Ports: []corev1.ServicePort{
			tcpPort("tcp-port", 80, intstr.FromString("svc1")), udpPort("udp-port", 80, intstr.FromString("svc2"))}}})
	spec := netserver("multiprotocol-test", "node-a", sel, 100, 100)
	spec.ports = []corev1.ContainerPort{{Name: "svc1", ContainerPort: 100, Protocol: corev1.ProtocolTCP},
		{Name: "svc2", ContainerPort: 100, Protocol: corev1.ProtocolUDP}}
	server := b.runPod(t, ns, spec)
	exec := b.execPod(t, ns, "node-b")
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), []string{server.name})
	reachesAllUDP(t, "execpod", exec.ns, vip(svc, 80), []string{server.name})
}

// serveHostnameService is H7's service: N netexec pods on 9376 (one per
// node in turn) behind a ClusterIP Service 80 -> 9376.
func (b *bed) serveHostnameService(t *testing.T, ns, name string, n int) (*corev1.Service, []string) {
	t.Helper()
	sel := map[string]string{"name": name}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(9376))}}})
	var nodes []string
	for i := 0; i < n; i++ {
		nodes = append(nodes, nodeNames[i%len(nodeNames)])
	}
	_, names := b.runPods(t, ns, name, sel, 9376, 0, nodes...)
	return svc, names
}

// up is H7's verifyServeHostnameServiceUp: from a node and from a pod,
// every endpoint answers.
func up(t *testing.T, addr netip.AddrPort, want []string, froms ...pod) {
	t.Helper()
	for _, f := range froms {
		reachesAll(t, f.name, f.ns, addr, want)
	}
}

// upAndDown is SN-13: three Services of three pods; svc1 and svc2 up;
// svc1 deleted: down from the node, svc2 still up; svc3 created: svc2 and
// svc3 up.
func (b *bed) upAndDown(t *testing.T) {
	ns := b.testNamespace(t, "up-down")
	host := b.runPod(t, ns, podSpec{name: "hostexec", node: "node-a", hostNetwork: true})
	exec := b.execPod(t, ns, "node-b")
	svc1, names1 := b.serveHostnameService(t, ns, "up-down-1", 3)
	svc2, names2 := b.serveHostnameService(t, ns, "up-down-2", 3)
	up(t, vip(svc1, 80), names1, host, exec)
	up(t, vip(svc2, 80), names2, host, exec)
	b.deleteService(t, ns, svc1.Name)
	goesDown(t, "node-a", host.ns, vip(svc1, 80), kubeProxyEndpointLagTimeout)
	up(t, vip(svc2, 80), names2, host, exec)
	svc3, names3 := b.serveHostnameService(t, ns, "up-down-3", 3)
	if svc3.Spec.ClusterIP == svc2.Spec.ClusterIP {
		t.Fatalf("svc3 got svc2's VIP %s", svc2.Spec.ClusterIP)
	}
	up(t, vip(svc2, 80), names2, host, exec)
	up(t, vip(svc3, 80), names3, host, exec)
}

// recreated is SN-14: one pod; up; the Service deleted and created again
// (a new VIP): up on the new VIP.
func (b *bed) recreated(t *testing.T) {
	ns := b.testNamespace(t, "recreated")
	host := b.runPod(t, ns, podSpec{name: "hostexec", node: "node-a", hostNetwork: true})
	exec := b.execPod(t, ns, "node-b")
	svc, names := b.serveHostnameService(t, ns, "service-recreated", 1)
	up(t, vip(svc, 80), names, host, exec)
	b.deleteService(t, ns, svc.Name)
	again := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc.Name},
		Spec: corev1.ServiceSpec{Selector: svc.Spec.Selector, Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(9376))}}})
	up(t, vip(again, 80), names, host, exec)
}

// rejectedNoEndpoints is SN-15: a Service with no pods; a connection from
// a pod on node-a to its VIP:80 is REFUSED within 30 s (not a timeout).
func (b *bed) rejectedNoEndpoints(t *testing.T) {
	ns := b.testNamespace(t, "no-pods")
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "no-pods"}, Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(80))}}})
	exec := b.execPod(t, ns, "node-a")
	eventually(t, "execpod -> no-pods:80 refused", kubeProxyEndpointLagTimeout, func() error { return refused(exec.ns, vip(svc, 80)) })
}

// serviceProxyName is SN-17: svcDisabled carries
// service.kubernetes.io/service-proxy-name=foo-bar (another proxy's), so
// it is never served; svcToggled is served, not served while it carries
// the label, served again when the label goes.
func (b *bed) serviceProxyName(t *testing.T) {
	ns := b.testNamespace(t, "proxy-name")
	host := b.runPod(t, ns, podSpec{name: "hostexec", node: "node-a", hostNetwork: true})
	exec := b.execPod(t, ns, "node-b")
	const label = "service.kubernetes.io/service-proxy-name"
	disabledSel := map[string]string{"name": "service-proxy-disabled"}
	disabled := b.createService(t, ns, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "service-proxy-disabled", Labels: map[string]string{label: "foo-bar"}},
		Spec:       corev1.ServiceSpec{Selector: disabledSel, Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(9376))}}})
	b.runPods(t, ns, "service-proxy-disabled", disabledSel, 9376, 0, "node-a", "node-b", "node-c")
	toggled, names := b.serveHostnameService(t, ns, "service-proxy-toggled", 3)

	up(t, vip(toggled, 80), names, host, exec)
	neverAnswers(t, "node-a", host.ns, vip(disabled, 80), 3)
	b.updateService(t, ns, toggled.Name, func(s *corev1.Service) { s.Labels = map[string]string{label: "foo-bar"} })
	goesDown(t, "node-a", host.ns, vip(toggled, 80), kubeProxyEndpointLagTimeout)
	b.updateService(t, ns, toggled.Name, func(s *corev1.Service) { delete(s.Labels, label) })
	up(t, vip(toggled, 80), names, host, exec)
	neverAnswers(t, "node-a", host.ns, vip(disabled, 80), 3)
}

// headlessLabel is SN-18: a selector-less Service and a custom
// EndpointSlice to a pod on 8090: up; the slice labelled
// service.kubernetes.io/headless: down from the node.
func (b *bed) headlessLabel(t *testing.T) {
	ctx := context.Background()
	ns := b.testNamespace(t, "headless-label")
	host := b.runPod(t, ns, podSpec{name: "hostexec", node: "node-a", hostNetwork: true})
	exec := b.execPod(t, ns, "node-b")
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "service-headless-toggled"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(8090))}}})
	server := b.runPod(t, ns, netserver("service-headless-toggled-0", "node-c", nil, 8090, 0))
	b.customSlice(t, ns, "service-headless-toggled-slice", svc.Name,
		discoveryv1.EndpointPort{Name: ptr.To(""), Port: ptr.To(int32(8090)), Protocol: ptr.To(corev1.ProtocolTCP)}, server.ip)
	up(t, vip(svc, 80), []string{server.name}, host, exec)
	s, err := b.client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "service-headless-toggled-slice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels["service.kubernetes.io/headless"] = ""
	if _, err := b.client.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	goesDown(t, "node-a", host.ns, vip(svc, 80), kubeProxyEndpointLagTimeout)
}

// addDeletePorts is SN-106: port 80 -> named svc1 (pod1:100); port 81 ->
// named svc2 (pod2:101) added; both ports reach their pod; port 81
// removed: port 80 still reaches pod1 and 81 stops answering.
func (b *bed) addDeletePorts(t *testing.T) {
	ns := b.testNamespace(t, "add-delete-ports")
	sel := map[string]string{"app": "edit-endpoint-test"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "edit-endpoint-test"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{tcpPort("portname1", 80, intstr.FromString("svc1"))}}})
	exec := b.execPod(t, ns, "node-c")
	p1 := netserver("pod1", "node-a", sel, 100, 0)
	p1.ports = []corev1.ContainerPort{{Name: "svc1", ContainerPort: 100}}
	b.runPod(t, ns, p1)
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 80), "pod1")

	b.updateService(t, ns, svc.Name, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, tcpPort("portname2", 81, intstr.FromString("svc2")))
	})
	p2 := netserver("pod2", "node-b", sel, 101, 0)
	p2.ports = []corev1.ContainerPort{{Name: "svc2", ContainerPort: 101}}
	b.runPod(t, ns, p2)
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 80), "pod1")
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 81), "pod2")

	b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] })
	goesDown(t, "execpod", exec.ns, vip(svc, 81), kubeProxyEndpointLagTimeout)
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 80), "pod1")
}

// nodePortBothProtocols is SN-107: a ClusterIP TCP Service becomes a
// NodePort (tcp-port 80/TCP -> 9376), then gains udp-port 80/UDP -> 9376:
// VIP and NodePorts of two nodes over both protocols reach both pods.
func (b *bed) nodePortBothProtocols(t *testing.T) {
	ns := b.testNamespace(t, "nodeport-protocols")
	sel := map[string]string{"app": "nodeport-update-service"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nodeport-update-service"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{tcpPort("tcp-port", 80, intstr.FromInt(9376))}}})
	_, names := b.runPods(t, ns, "nodeport-update-service", sel, 9376, 9376, "node-a", "node-b")
	exec := b.execPod(t, ns, "node-c")
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), names)
	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, "node-a"), svc.Spec.Ports[0].NodePort), names)
	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, udpPort("udp-port", 80, intstr.FromInt(9376)))
	})
	if svc.Spec.Ports[0].NodePort == 0 || svc.Spec.Ports[1].NodePort == 0 {
		t.Fatalf("node ports %d, %d: want both allocated", svc.Spec.Ports[0].NodePort, svc.Spec.Ports[1].NodePort)
	}
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), names)
	reachesAllUDP(t, "execpod", exec.ns, vip(svc, 80), names)
	for _, n := range []string{"node-a", "node-b"} {
		reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, n), svc.Spec.Ports[0].NodePort), names)
		reachesAllUDP(t, "execpod", exec.ns, nodePort(b.node(t, n), svc.Spec.Ports[1].NodePort), names)
	}
}

// releaseNodePorts is SN-30: a NodePort Service deleted leaves no socket
// on its node port on any node (binding the port succeeds there, as
// upstream's `ss -ant46 'sport = :NP' | grep LISTEN` finds nothing), and a
// Service asking for the same node port is created.
func (b *bed) releaseNodePorts(t *testing.T) {
	ns := b.testNamespace(t, "release-nodeports")
	spec := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nodeport-reuse"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "none"},
				Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(80))}}}
	}
	svc := b.createService(t, ns, spec())
	np := svc.Spec.Ports[0].NodePort
	b.deleteService(t, ns, svc.Name)
	for _, n := range b.nodes {
		eventually(t, fmt.Sprintf("%s: nothing holds TCP port %d", n.name, np), kubeProxyEndpointLagTimeout, func() error {
			return n.ns.Do(func() error {
				l, err := net.Listen("tcp", fmt.Sprintf(":%d", np))
				if err != nil {
					return err
				}
				return l.Close()
			})
		})
	}
	again := spec()
	again.Spec.Ports[0].NodePort = np
	b.createService(t, ns, again)
}

// noSNAT is SN-105 (no_snat.go): one netexec pod per node; for every
// ordered pair, GET /clientip from one pod to the other's IP sees the
// source pod's own IP.
func (b *bed) noSNAT(t *testing.T) {
	ns := b.testNamespace(t, "no-snat-test")
	pods, _ := b.runPods(t, ns, "no-snat-test", map[string]string{"no-snat-test": "true"}, 8085, 0, nodeNames...)
	for _, src := range pods {
		for _, dst := range pods {
			if src.name == dst.name {
				continue
			}
			got, err := clientIP(src.ns, netip.AddrPortFrom(dst.ip, 8085), netip.Addr{}, 5*time.Second)
			if err != nil {
				t.Errorf("%s -> %s: %v", src.name, dst.name, err)
			} else if got != src.ip {
				t.Errorf("%s -> %s: the server saw %s, want %s (no SNAT between pods)", src.name, dst.name, got, src.ip)
			}
		}
	}
}

// kubeProxyURLs is SN-112: from each node, localhost:10256/healthz answers
// 200 with lastUpdated in its body and localhost:10249/proxyMode 200.
func (b *bed) kubeProxyURLs(t *testing.T) {
	for _, n := range b.nodes {
		get := func(ns *ktest.NS, port uint16, path string) (int, string, error) {
			var code int
			var body string
			err := ns.Do(func() error {
				var err error
				code, body, err = cluster.HTTPGet(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), path, netip.Addr{}, 5*time.Second)
				return err
			})
			return code, body, err
		}
		eventually(t, n.name+": localhost:10256/healthz 200 with lastUpdated", 30*time.Second, func() error {
			code, body, err := get(n.ns.NS, 10256, "/healthz")
			if err == nil && (code != 200 || !strings.Contains(body, "lastUpdated")) {
				return fmt.Errorf("status %d, body %q", code, body)
			}
			return err
		})
		eventually(t, n.name+": localhost:10249/proxyMode 200", 30*time.Second, func() error {
			code, body, err := get(n.ns.NS, 10249, "/proxyMode")
			if err == nil && code != 200 {
				return fmt.Errorf("status %d, body %q", code, body)
			}
			if err == nil {
				t.Logf("%s: /proxyMode says %q", n.name, body)
			}
			return err
		})
	}
}
