//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// restTests are the checklist's tests the bed could not run before it had
// the servicecidr controller, an ECMP route for the fake load balancer
// and upstream's boom-server, and the session affinity timeouts, which
// only cost time: SN-24, SN-46, SN-95 (invalidstate_kernel_test.go),
// SN-52 and SN-55.
func (b *bed) restTests(t *testing.T) {
	t.Run("should create Services and serve on different Service CIDRs", b.serviceCIDRs)
	t.Run("should target all nodes with endpoints", b.lbAllEndpointNodes)
	t.Run("proxy implementation should not be vulnerable to the invalid conntrack state bug [Privileged]", b.invalidConntrackState)
	t.Run("should have session affinity timeout work", b.affinityTimeoutTests)
}

// serviceCIDRs is SN-24: a ServiceCIDR 203.0.113.0/24 beside the API
// server's range, Ready (the servicecidr controller on the host); a
// NodePort Service with clusterIP 203.0.113.10 (or the next free) 80 ->
// 9376 over two pods; H6 without its DNS leg: from an exec pod the VIP
// and two nodes' NodePorts reach both pods, and from a node the VIP too.
func (b *bed) serviceCIDRs(t *testing.T) {
	ctx := context.Background()
	cidr := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "test-svc-cidr"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"203.0.113.0/24"}}}
	if _, err := b.client.NetworkingV1().ServiceCIDRs().Create(ctx, cidr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := b.testNamespace(t, "servicecidrs")
	t.Cleanup(func() {
		// The Service first: its IPAddress holds the ServiceCIDR's finalizer.
		_ = b.client.CoreV1().Services(ns).Delete(ctx, "cidr1-test", metav1.DeleteOptions{})
		_ = b.client.NetworkingV1().ServiceCIDRs().Delete(ctx, cidr.Name, metav1.DeleteOptions{})
	})
	if err := wait.PollUntilContextTimeout(ctx, time.Second, respondingTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := b.client.NetworkingV1().ServiceCIDRs().Get(ctx, cidr.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == networkingv1.ServiceCIDRConditionReady {
				return c.Status == metav1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("ServiceCIDR %s not Ready: %v", cidr.Name, err)
	}
	sel := map[string]string{"app": "cidr1-test"}
	var svc *corev1.Service
	ip := netip.MustParseAddr("203.0.113.10")
	var err error
	for i := 0; i < 5; i++ {
		svc, err = b.client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "cidr1-test"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: ip.String(), Selector: sel,
				Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(9376))}}}, metav1.CreateOptions{})
		if err == nil {
			break
		}
		ip = ip.Next()
	}
	if err != nil {
		t.Fatalf("no Service in the new ServiceCIDR: %v", err)
	}
	if !netip.MustParsePrefix("203.0.113.0/24").Contains(netip.MustParseAddr(svc.Spec.ClusterIP)) {
		t.Fatalf("cluster IP %s is not in 203.0.113.0/24", svc.Spec.ClusterIP)
	}
	_, names := b.runPods(t, ns, "cidr1-test", sel, 9376, 0, "node-a", "node-b")
	exec := b.execPod(t, ns, "node-c")
	np := svc.Spec.Ports[0].NodePort
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), names)
	reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, "node-a"), np), names)
	reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, "node-b"), np), names)
	reachesAll(t, "node-c", b.node(t, "node-c").ns.NS, vip(svc, 80), names)
}

// lbAllEndpointNodes is SN-46 (ExternalTrafficPolicy: Local): two
// endpoints on node-a and node-b behind a LoadBalancer. The fake load
// balancer does what a cloud's does with the health check node port: it
// sends traffic only to nodes whose /healthz passes (node-a and node-b,
// not node-c), spread per connection (an ECMP route in the runner hashing
// on ports, fib_multipath_hash_policy=1). H9(false) made strict: the
// runner's requests reach both endpoints and nobody else.
func (b *bed) lbAllEndpointNodes(t *testing.T) {
	ns := b.testNamespace(t, "lb-all-endpoint-nodes")
	sel := map[string]string{"app": "external-local-nodes"}
	_, names := b.runPods(t, ns, "external-local-nodes", sel, 8080, 0, "node-a", "node-b")
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external-local-nodes"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: sel,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(8080))}}})
	hcnp := uint16(svc.Spec.HealthCheckNodePort)
	if hcnp == 0 {
		t.Fatal("no healthCheckNodePort allocated")
	}
	ip := lbAddr(11)
	var healthy []*bedNode
	for _, n := range b.nodes {
		pass := n.name != "node-c"
		healthCheckIs(t, b.runner, netip.AddrPortFrom(n.ip, hcnp), pass, 2, kubeProxyEndpointLagTimeout)
		if pass {
			healthy = append(healthy, n)
		}
	}
	b.fakeLB(t, svc, ip, healthy[0])
	route := []string{"route", "replace", netip.PrefixFrom(ip, 32).String()}
	for _, n := range healthy {
		route = append(route, "nexthop", "via", n.ip.String())
	}
	b.runner.Run(t, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1")
	t.Cleanup(func() { _, _ = b.runner.Exec("sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=0") })
	b.runner.Run(t, "ip", route...)
	reachesAll(t, "runner", b.runner, netip.AddrPortFrom(ip, 80), names)
}

// sessionAffinityTimeout is upstream's SessionAffinityTimeout (service.go):
// ClientIP affinity's timeoutSeconds in SN-52 and SN-55.
const sessionAffinityTimeout = 125

// affinityTimeoutTests are SN-52 and SN-55, run side by side (each waits
// out the timeout at least once: over two minutes).
func (b *bed) affinityTimeoutTests(t *testing.T) {
	t.Run("should have session affinity timeout work for service with type clusterIP [LinuxOnly]", func(t *testing.T) {
		t.Parallel()
		b.affinityTimeout(t, "affinity-clusterip-timeout", corev1.ServiceTypeClusterIP, "node-b")
	})
	t.Run("should have session affinity timeout work for NodePort service [LinuxOnly]", func(t *testing.T) {
		t.Parallel()
		b.affinityTimeout(t, "affinity-nodeport-timeout", corev1.ServiceTypeNodePort, "node-c")
	})
}

// affinityTimeout is execAffinityTestForSessionAffinityTimeout: three
// serve-hostname pods behind a Service with ClientIP affinity of 125 s;
// the exec pod reaches it (the VIP, or node-a's NodePort), H9(true): 16
// requests answered by one host; then a request, 130 s of silence, another,
// up to ten times, until a second host answers: the affinity expired.
func (b *bed) affinityTimeout(t *testing.T, name string, typ corev1.ServiceType, execNode string) {
	ns := b.testNamespace(t, name)
	sel := map[string]string{"app": name}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: typ, Selector: sel, SessionAffinity: corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(sessionAffinityTimeout))}},
			Ports:                 []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(9376))}}})
	_, names := b.runPods(t, ns, name, sel, 9376, 0, "node-a", "node-b", "node-c")
	target := vip(svc, 80)
	if typ == corev1.ServiceTypeNodePort {
		target = nodePort(b.node(t, "node-a"), svc.Spec.Ports[0].NodePort)
	}
	exec := b.runPod(t, ns, podSpec{name: "execpod-affinity", node: execNode})
	reachesAny(t, "execpod", exec, target, names)
	checkAffinity(t, "execpod", exec.ns, target, true)
	hosts := map[string]bool{}
	for i := 0; i < 10; i++ {
		got, err := hostnameOverHTTP(exec.ns, target, 2*time.Second)
		if err == nil {
			hosts[got] = true
			if len(hosts) > 1 {
				t.Logf("execpod -> %s: a second host after %d silences of %d s: %v", target, i, sessionAffinityTimeout+5, hosts)
				return
			}
		}
		t.Logf("execpod -> %s try %d: %q, %v; %d s of silence", target, i, got, err, sessionAffinityTimeout+5)
		time.Sleep((sessionAffinityTimeout + 5) * time.Second)
	}
	t.Errorf("execpod -> %s: session is sticky after reaching the timeout: only %v answered", target, hosts)
}

// reachesAny waits (respondingTimeout) until from's request to addr is
// answered by one of want (H6's one answer).
func reachesAny(t *testing.T, what string, from pod, addr netip.AddrPort, want []string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s -> %s answers", what, addr), respondingTimeout, func() error {
		got, err := hostnameOverHTTP(from.ns, addr, 5*time.Second)
		if err != nil {
			return err
		}
		for _, w := range want {
			if got == w {
				return nil
			}
		}
		return fmt.Errorf("answered by %q, not one of %v", got, want)
	})
}
