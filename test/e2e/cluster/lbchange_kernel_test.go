//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// lbChangeTests are the LoadBalancer tests that change a Service under
// the fake load balancer (loadbalancer.go): its type and ports (SN-32,
// SN-33) and, with ETP Local, the node of its only endpoint (SN-45).
func (b *bed) lbChangeTests(t *testing.T) {
	t.Run("should be able to change the type and ports of a TCP service", func(t *testing.T) {
		b.changeTypeAndPorts(t, corev1.ProtocolTCP, lbAddr(12))
	})
	t.Run("should be able to change the type and ports of a UDP service", func(t *testing.T) {
		b.changeTypeAndPorts(t, corev1.ProtocolUDP, lbAddr(13))
	})
	t.Run("should only target nodes with endpoints", b.lbOnlyNodesWithEndpoints)
}

// protoChecks are H6's reachability checks over one protocol: HTTP GET
// /hostname over TCP, the datagram "hostname" over UDP.
type protoChecks struct {
	proto corev1.Protocol
}

// reaches is reachesAll or reachesAllUDP.
func (c protoChecks) reaches(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, want []string) {
	t.Helper()
	if c.proto == corev1.ProtocolUDP {
		reachesAllUDP(t, what, from, addr, want)
		return
	}
	reachesAll(t, what, from, addr, want)
}

// down is testNotReachableHTTP / testNotReachableUDP: the request fails
// (no HTTP answer; no datagram back) within timeout.
func (c protoChecks) down(t *testing.T, what string, from *ktest.NS, addr netip.AddrPort, timeout time.Duration) {
	t.Helper()
	if c.proto == corev1.ProtocolUDP {
		goesDownUDP(t, what, from, addr, timeout)
		return
	}
	goesDown(t, what, from, addr, timeout)
}

// changeTypeAndPorts is SN-32 (TCP) and SN-33 (UDP): the jig's Service
// mutability-test (80 -> 80) over one netexec pod on node-b, an exec pod
// on node-c, the runner outside. ClusterIP: H6; NodePort: H6 with the
// node ports of node-a and node-b; LoadBalancer (the test plays the cloud:
// ingress ip routed via node-a): the node port unchanged, H6, the runner
// reaches the ingress; the node port changed: the ingress unchanged, the
// runner reaches it (and, beyond upstream, the new node port, while the
// old one goes down); the port 80 -> 81: the runner reaches ingress:81
// (and ingress:80 goes down); no pod: ingress:81 goes down; a pod again:
// it answers; back to ClusterIP: the node port cleared, the cloud takes
// the ingress away from the status but the runner keeps its route via
// node-a, so "ingress:81 goes down" is node-a's proxy dropping it.
func (b *bed) changeTypeAndPorts(t *testing.T, proto corev1.Protocol, ip netip.Addr) {
	c := protoChecks{proto: proto}
	ns := b.testNamespace(t, "mutability-"+strings.ToLower(string(proto)))
	sel := map[string]string{"testid": "mutability-test"}
	svcPort := corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt(80), Protocol: proto}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "mutability-test"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{svcPort}}})
	server := func(name string) pod {
		if proto == corev1.ProtocolUDP {
			return b.runPod(t, ns, netserver(name, "node-b", sel, 8080, 80))
		}
		return b.runPod(t, ns, netserver(name, "node-b", sel, 80, 0))
	}
	backend := server("mutability-test-0")
	names := []string{backend.name}
	exec := b.execPod(t, ns, "node-c")
	nodeA, nodeB := b.node(t, "node-a"), b.node(t, "node-b")

	c.reaches(t, "ClusterIP: execpod", exec.ns, vip(svc, 80), names)

	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	np := svc.Spec.Ports[0].NodePort
	checkAll := func(stage string, svc *corev1.Service, np int32) {
		t.Helper()
		c.reaches(t, stage+": execpod", exec.ns, vip(svc, svc.Spec.Ports[0].Port), names)
		c.reaches(t, stage+": execpod", exec.ns, nodePort(nodeA, np), names)
		c.reaches(t, stage+": execpod", exec.ns, nodePort(nodeB, np), names)
	}
	checkAll("NodePort", svc, np)

	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer })
	if got := svc.Spec.Ports[0].NodePort; got != np {
		t.Fatalf("to LoadBalancer: node port changed %d -> %d", np, got)
	}
	b.fakeLB(t, svc, ip, nodeA)
	checkAll("LoadBalancer", svc, np)
	c.reaches(t, "LoadBalancer: runner", b.runner, netip.AddrPortFrom(ip, 80), names)

	oldNP := np
	svc = b.changeNodePort(t, ns, svc.Name, np)
	np = svc.Spec.Ports[0].NodePort
	if got := ingressOf(svc); got != ip.String() {
		t.Fatalf("after the node port change: ingress %q, want %s", got, ip)
	}
	c.reaches(t, "new node port: runner", b.runner, netip.AddrPortFrom(ip, 80), names)
	c.reaches(t, "new node port: runner", b.runner, nodePort(nodeA, np), names)
	c.down(t, "old node port: runner", b.runner, nodePort(nodeA, oldNP), kubeProxyEndpointLagTimeout)

	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Ports[0].Port++ })
	port := svc.Spec.Ports[0].Port
	if port != 81 || svc.Spec.Ports[0].NodePort != np || ingressOf(svc) != ip.String() {
		t.Fatalf("after the port change: port %d node port %d ingress %q; want 81, %d, %s",
			port, svc.Spec.Ports[0].NodePort, ingressOf(svc), np, ip)
	}
	ingress := netip.AddrPortFrom(ip, uint16(port))
	c.reaches(t, "port 81: runner", b.runner, ingress, names)
	c.down(t, "port 81: runner, old port", b.runner, netip.AddrPortFrom(ip, 80), kubeProxyEndpointLagTimeout)

	b.deletePodNow(t, ns, backend.name)
	c.down(t, "no pod: runner", b.runner, ingress, respondingTimeout)
	backend = server("mutability-test-1")
	names = []string{backend.name}
	c.reaches(t, "a pod again: runner", b.runner, ingress, names)

	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	if got := svc.Spec.Ports[0].NodePort; got != 0 {
		t.Fatalf("back to ClusterIP: node port %d not cleared", got)
	}
	b.clearIngress(t, svc)
	c.down(t, "ClusterIP again: runner", b.runner, ingress, respondingTimeout)
	c.down(t, "ClusterIP again: runner", b.runner, nodePort(nodeA, np), kubeProxyEndpointLagTimeout)
	c.reaches(t, "ClusterIP again: execpod", exec.ns, vip(svc, port), names)
}

// changeNodePort is the jig's ChangeServiceNodePort: the next free port
// of the range after initial.
func (b *bed) changeNodePort(t *testing.T, ns, name string, initial int32) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	for next := initial + 1; next != initial; next++ {
		if next > 32767 {
			next = 30000
		}
		s, err := b.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Ports[0].NodePort = next
		got, err := b.client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil && strings.Contains(err.Error(), "provided port is already allocated") {
			continue
		}
		if err != nil {
			t.Fatalf("node port %d -> %d: %v", initial, next, err)
		}
		return got
	}
	t.Fatalf("no free node port")
	return nil
}

// ingressOf is the Service's first ingress IP, "" for none.
func ingressOf(svc *corev1.Service) string {
	if len(svc.Status.LoadBalancer.Ingress) == 0 {
		return ""
	}
	return svc.Status.LoadBalancer.Ingress[0].IP
}

// clearIngress is the cloud destroying the load balancer of a Service
// that is no longer of type LoadBalancer: status.loadBalancer emptied
// (when the API server has not done it).
func (b *bed) clearIngress(t *testing.T, svc *corev1.Service) {
	t.Helper()
	ctx := context.Background()
	s, err := b.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Status.LoadBalancer.Ingress) == 0 {
		return
	}
	s.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	if _, err := b.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("fake LB: clear the ingress of %s/%s: %v", svc.Namespace, svc.Name, err)
	}
}

// lbOnlyNodesWithEndpoints is SN-45: an ETP=Local LoadBalancer Service
// (8081 -> 80) whose only endpoint moves to each node in turn. The cloud's
// load balancer sends to the nodes whose health check node port passes:
// the bed routes the ingress from the runner via the endpoint's node, and
// the runner reaches the ingress; from a pod on node-c, the health check
// node port of the endpoint's node answers 200 and the two others do not
// (twice in a row each, within 30 s: upstream's threshold).
func (b *bed) lbOnlyNodesWithEndpoints(t *testing.T) {
	ns := b.testNamespace(t, "external-local-nodes")
	sel := map[string]string{"testid": "external-local-nodes"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external-local-nodes"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: sel,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{tcpPort("", 8081, intstr.FromInt(80))}}})
	hcnp := svc.Spec.HealthCheckNodePort
	if hcnp == 0 {
		t.Fatal("Service HealthCheck NodePort was not allocated")
	}
	ip := lbAddr(11)
	b.fakeLB(t, svc, ip, b.node(t, "node-a"))
	ingress := netip.AddrPortFrom(ip, 8081)
	client := b.execPod(t, ns, "node-c")
	for i, n := range b.nodes {
		name := fmt.Sprintf("external-local-nodes-%d", i)
		b.runPod(t, ns, netserver(name, n.name, sel, 80, 0))
		b.runner.Run(t, "ip", "route", "replace", netip.PrefixFrom(ip, 32).String(), "via", n.ip.String())
		answeredOnlyBy(t, "runner via "+n.name, b.runner, ingress, name)
		for _, o := range b.nodes {
			healthCheckIs(t, client.ns, netip.AddrPortFrom(o.ip, uint16(hcnp)), o == n, 2, kubeProxyEndpointLagTimeout)
		}
		b.deletePodNow(t, ns, name)
	}
}

// healthCheckIs is testHTTPHealthCheckNodePortFromTestContainer: from ns,
// GET http://addr/healthz until threshold answers (not necessarily in a
// row) are 200 (pass) or not 200 (!pass), within timeout.
func healthCheckIs(t *testing.T, from *ktest.NS, addr netip.AddrPort, pass bool, threshold int, timeout time.Duration) {
	t.Helper()
	count := 0
	eventually(t, fmt.Sprintf("%s/healthz passes: %v, %d times", addr, pass, threshold), timeout, func() error {
		var code int
		err := from.Do(func() error {
			var err error
			code, _, err = cluster.HTTPGet(addr, "/healthz", netip.Addr{}, 5*time.Second)
			return err
		})
		if (err == nil && code == 200) == pass {
			count++
		}
		if count < threshold {
			return fmt.Errorf("%d of %d (last: %d, %v)", count, threshold, code, err)
		}
		return nil
	})
}
