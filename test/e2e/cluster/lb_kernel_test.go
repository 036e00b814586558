//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// The load balancer the bed plays (loadbalancer.go's tests need a cloud):
// the test writes status.loadBalancer.ingress itself and routes the
// ingress IP from the runner to one node, as an L3 load balancer with a
// single healthy target would.
var lbPrefix = netip.MustParsePrefix("192.168.60.0/24")

// fakeLB gives the LoadBalancer Service its ingress ip and routes ip from
// the runner via node.
func (b *bed) fakeLB(t *testing.T, svc *corev1.Service, ip netip.Addr, via *bedNode) {
	t.Helper()
	ctx := context.Background()
	s, err := b.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip.String()}}
	if _, err := b.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("fake LB: ingress %s for %s/%s: %v", ip, svc.Namespace, svc.Name, err)
	}
	route := netip.PrefixFrom(ip, 32).String()
	b.runner.Run(t, "ip", "route", "replace", route, "via", via.ip.String())
	t.Cleanup(func() { _, _ = b.runner.Exec("ip", "route", "del", route) })
}

// lbTests are the checklist's LoadBalancer tests (loadbalancer.go) on the
// fake load balancer.
func (b *bed) lbTests(t *testing.T) {
	t.Run("should only allow access from service loadbalancer source ranges", b.lbSourceRanges)
	t.Run("should work for type=LoadBalancer", b.lbLocalNoSNAT)
	t.Run("should work from pods", b.lbFromPods)
	t.Run("should have session affinity work for LoadBalancer service with Cluster traffic policy", func(t *testing.T) {
		b.lbAffinity(t, "lb-affinity-cluster", corev1.ServiceExternalTrafficPolicyCluster, lbAddr(3))
	})
	t.Run("should have session affinity work for LoadBalancer service with Local traffic policy", func(t *testing.T) {
		b.lbAffinity(t, "lb-affinity-local", corev1.ServiceExternalTrafficPolicyLocal, lbAddr(4))
	})
	t.Run("should be able to switch session affinity for LoadBalancer service with Cluster traffic policy", func(t *testing.T) {
		b.lbAffinitySwitch(t, "lb-switch-cluster", corev1.ServiceExternalTrafficPolicyCluster, lbAddr(6))
	})
	t.Run("should be able to switch session affinity for LoadBalancer service with Local traffic policy", func(t *testing.T) {
		b.lbAffinitySwitch(t, "lb-switch-local", corev1.ServiceExternalTrafficPolicyLocal, lbAddr(7))
	})
	t.Run("should be able to create LoadBalancer Service without NodePort and change it", b.lbWithoutNodePort)
	t.Run("should be able to preserve UDP traffic when server pod cycles for a LoadBalancer service on different nodes", func(t *testing.T) {
		b.lbUDPServerCycles(t, "lb-udp-different", "node-b", 54321, lbAddr(9))
	})
	t.Run("should be able to preserve UDP traffic when server pod cycles for a LoadBalancer service on the same nodes", func(t *testing.T) {
		b.lbUDPServerCycles(t, "lb-udp-same", "node-a", 54322, lbAddr(10))
	})
}

// lbAddr is the fake load balancer's i-th ingress IP, 192.168.60.i.
func lbAddr(i byte) netip.Addr {
	a := lbPrefix.Addr().As4()
	a[3] = i
	return netip.AddrFrom4(a)
}

// lbService is a LoadBalancer Service 80 -> 8080 over the given pods'
// label, with its fake ingress routed via node-a.
func (b *bed) lbService(t *testing.T, ns, name string, sel map[string]string, etp corev1.ServiceExternalTrafficPolicy,
	affinity corev1.ServiceAffinity, ip netip.Addr) (*corev1.Service, netip.AddrPort) {
	t.Helper()
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: sel, ExternalTrafficPolicy: etp,
			SessionAffinity: affinity, Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(8080))}}})
	b.fakeLB(t, svc, ip, b.node(t, "node-a"))
	return svc, netip.AddrPortFrom(ip, 80)
}

// lbSourceRanges is SN-34: one backend, acceptPod on node-a, dropPod on
// node-b, the runner outside; loadBalancerSourceRanges none: all three
// reach the ingress; {acceptPod's IP, its node's IP}: only acceptPod;
// 0.0.0.0/1 + 128.0.0.0/1: all; 255.0.0.0/32: none; none again: all.
func (b *bed) lbSourceRanges(t *testing.T) {
	ns := b.testNamespace(t, "lb-source-ranges")
	sel := map[string]string{"app": "lb-sourcerange"}
	backend := b.runPod(t, ns, netserver("lb-sourcerange-0", "node-c", sel, 8080, 0))
	svc, ingress := b.lbService(t, ns, "lb-sourcerange", sel, corev1.ServiceExternalTrafficPolicyCluster, "", lbAddr(1))
	accept := b.runPod(t, ns, podSpec{name: "execpod-accept", node: "node-a"})
	drop := b.runPod(t, ns, podSpec{name: "execpod-drop", node: "node-b"})
	runner := pod{name: "runner", ns: b.runner, ip: runnerIP}
	check := func(round string, allowed ...pod) {
		t.Helper()
		for _, c := range []pod{runner, accept, drop} {
			ok := false
			for _, a := range allowed {
				ok = ok || a.name == c.name
			}
			if ok {
				answeredOnlyBy(t, round+": "+c.name, c.ns, ingress, backend.name)
			} else {
				goesDown(t, round+": "+c.name, c.ns, ingress, kubeProxyEndpointLagTimeout)
			}
		}
	}
	setRanges := func(ranges ...string) {
		b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = ranges })
	}
	check("no source ranges", runner, accept, drop)
	setRanges(netip.PrefixFrom(accept.ip, 32).String(), netip.PrefixFrom(b.node(t, "node-a").ip, 32).String())
	check("acceptPod's IP and node", accept)
	setRanges("0.0.0.0/1", "128.0.0.0/1")
	check("allow all", runner, accept, drop)
	setRanges("255.0.0.0/32")
	check("allow none")
	setRanges()
	check("ranges removed", runner, accept, drop)
}

// lbLocalNoSNAT is SN-44 (ExternalTrafficPolicy: Local): the runner's
// GET ingress/clientip, routed to the endpoint's node, sees the runner's
// own IP (upstream: an IP outside the nodes' subnet, which the runner on
// the nodes' LAN cannot show, so the bed asks for the exact address).
func (b *bed) lbLocalNoSNAT(t *testing.T) {
	ns := b.testNamespace(t, "lb-etp-local")
	sel := map[string]string{"app": "external-local-lb"}
	b.runPod(t, ns, netserver("external-local-lb", "node-a", sel, 8080, 0))
	svc, ingress := b.lbService(t, ns, "external-local-lb", sel, corev1.ServiceExternalTrafficPolicyLocal, "", lbAddr(2))
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatal("no healthCheckNodePort allocated")
	}
	sourceIs(t, "runner", b.runner, ingress, runnerIP)
}

// lbFromPods is SN-47: a pod GETs the ingress/clientip of an
// ETP=Local LoadBalancer whose endpoint is on another node: it is served
// (internal traffic uses every endpoint) and the server sees the pod's IP.
func (b *bed) lbFromPods(t *testing.T) {
	ns := b.testNamespace(t, "lb-from-pods")
	sel := map[string]string{"app": "external-local-pods"}
	b.runPod(t, ns, netserver("external-local-pods", "node-a", sel, 8080, 0))
	_, ingress := b.lbService(t, ns, "external-local-pods", sel, corev1.ServiceExternalTrafficPolicyLocal, "", lbAddr(5))
	for _, node := range []string{"node-a", "node-b"} {
		p := b.runPod(t, ns, podSpec{name: "pause-" + node, node: node})
		sourceIs(t, p.name, p.ns, ingress, p.ip)
	}
}

// lbAffinity is SN-35 and SN-37: three backends, ClientIP affinity; the
// runner's 16 requests to the ingress all reach one backend.
func (b *bed) lbAffinity(t *testing.T, name string, etp corev1.ServiceExternalTrafficPolicy, ip netip.Addr) {
	b.lbAffinityService(t, name, etp, ip)
}

// lbAffinitySwitch is SN-36 and SN-38: as lbAffinity, then affinity None:
// at least two backends answer; ClientIP again: one.
func (b *bed) lbAffinitySwitch(t *testing.T, name string, etp corev1.ServiceExternalTrafficPolicy, ip netip.Addr) {
	svc, ingress := b.lbAffinityService(t, name, etp, ip)
	b.updateService(t, svc.Namespace, svc.Name, func(s *corev1.Service) {
		s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
	})
	checkAffinity(t, "runner, None", b.runner, ingress, false)
	b.updateService(t, svc.Namespace, svc.Name, func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP })
	checkAffinity(t, "runner, ClientIP again", b.runner, ingress, true)
}

// lbAffinityService runs three backends (on node-a with Local, where the
// ingress is routed), a ClientIP LoadBalancer Service over them, and
// checks the affinity holds from the runner.
func (b *bed) lbAffinityService(t *testing.T, name string, etp corev1.ServiceExternalTrafficPolicy, ip netip.Addr) (*corev1.Service, netip.AddrPort) {
	t.Helper()
	ns := b.testNamespace(t, name)
	sel := map[string]string{"app": name}
	nodes := []string{"node-a", "node-b", "node-c"}
	if etp == corev1.ServiceExternalTrafficPolicyLocal {
		// Local: the ingress routes via node-a, so its endpoints are there.
		nodes = []string{"node-a", "node-a", "node-a"}
	}
	b.runPods(t, ns, name, sel, 8080, 0, nodes...)
	svc, ingress := b.lbService(t, ns, name, sel, etp, corev1.ServiceAffinityClientIP, ip)
	checkAffinity(t, "runner", b.runner, ingress, true)
	return svc, ingress
}

// lbWithoutNodePort is SN-39: a ClusterIP Service becomes a LoadBalancer
// with allocateLoadBalancerNodePorts false (no node port) and the runner
// reaches its ingress; allocation turned on: a node port is allocated,
// the ingress still answers, and so does the node port.
func (b *bed) lbWithoutNodePort(t *testing.T) {
	ns := b.testNamespace(t, "lb-no-nodeport")
	sel := map[string]string{"app": "lb-no-nodeport"}
	_, names := b.runPods(t, ns, "lb-no-nodeport", sel, 8080, 0, "node-b")
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb-no-nodeport"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(8080))}}})
	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) {
		s.Spec.Type, s.Spec.AllocateLoadBalancerNodePorts = corev1.ServiceTypeLoadBalancer, ptr.To(false)
	})
	if np := svc.Spec.Ports[0].NodePort; np != 0 {
		t.Fatalf("node port %d allocated with allocateLoadBalancerNodePorts false", np)
	}
	ip := lbAddr(8)
	b.fakeLB(t, svc, ip, b.node(t, "node-a"))
	ingress := netip.AddrPortFrom(ip, 80)
	answeredOnlyBy(t, "runner", b.runner, ingress, names[0])
	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptr.To(true) })
	np := svc.Spec.Ports[0].NodePort
	if np == 0 {
		t.Fatal("no node port allocated with allocateLoadBalancerNodePorts true")
	}
	answeredOnlyBy(t, "runner", b.runner, ingress, names[0])
	answeredOnlyBy(t, "runner", b.runner, nodePort(b.node(t, "node-a"), np), names[0])
}

// lbUDPServerCycles is SN-40 (backend2 on another node) and SN-41 (on the
// same node): the runner sends from a fixed port to the ingress of a UDP
// LoadBalancer (via node-a); backend1 on node-a must be heard; backend2
// added on node2 and backend1 deleted: backend2 must be heard, each within
// a minute (upstream: two).
func (b *bed) lbUDPServerCycles(t *testing.T, name, node2 string, local uint16, ip netip.Addr) {
	ns := b.testNamespace(t, name)
	sel := map[string]string{"app": "udp-lb"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "udp-lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: sel,
			Ports: []corev1.ServicePort{udpPort("udp", 80, intstr.FromInt(80))}}})
	b.fakeLB(t, svc, ip, b.node(t, "node-a"))
	loop := startUDPLoop(t, b.runner, local, netip.AddrPortFrom(ip, 80))
	b.runPod(t, ns, netserver("backend1", "node-a", sel, 8080, 80))
	seen := loop.waitFor(t, "backend1", 0, time.Minute)
	b.runPod(t, ns, netserver("backend2", node2, sel, 8080, 80))
	b.deletePodNow(t, ns, "backend1")
	loop.waitFor(t, "backend2", seen, time.Minute)
}

// sourceIs waits until from's GET addr/clientip is answered, and requires
// the address the server saw to be want.
func sourceIs(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, want netip.Addr) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s -> %s/clientip is %s", what, addr, want), respondingTimeout, func() error {
		got, err := clientIP(from, addr, netip.Addr{}, 5*time.Second)
		if err == nil && got != want {
			t.Fatalf("%s -> %s: the server saw %s, want %s", what, addr, got, want)
		}
		return err
	})
}
