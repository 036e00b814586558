//go:build kernel

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestClusterGuest runs in the VM under TestClusterVM: it builds the
// three-node bed once and runs the re-created upstream tests on it, each
// a subtest named after the upstream `It` (the checklist's SN number in
// the comment).
func TestClusterGuest(t *testing.T) {
	b := newBed(t)
	t.Log(b)
	b.upstreamTests(t)
	t.Run("Granular Checks: Services", b.granularChecks)
	t.Run("should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]", b.sourcePodIP)
	t.Run("should allow pods to hairpin back to themselves through services", b.hairpin)
	t.Run("should respect internalTrafficPolicy=Local Pod to Pod", b.itpLocalPodToPod)
	t.Run("should respect internalTrafficPolicy=Local Pod (hostNetwork: true) to Pod", b.itpLocalHostNetworkToPod)
	t.Run("should respect internalTrafficPolicy=Local Pod and Node, to Pod (hostNetwork: true)", b.itpLocalHostNetworkEndpoint)
	t.Run("should fallback to terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Cluster", b.terminatingFallbackCluster)
	t.Run("should fallback to local terminating endpoints when there are no ready endpoints with internalTrafficPolicy=Local", b.terminatingFallbackLocal)
	t.Run("should support externalTrafficPolicy=Local for type=NodePort", b.etpLocalNodePort)
	t.Run("should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes", b.etpChangeHealthCheck)
	b.laterTests(t)
}

func vip(svc *corev1.Service, port int32) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), uint16(port))
}

func nodePort(n *bedNode, port int32) netip.AddrPort {
	return netip.AddrPortFrom(n.ip, uint16(port))
}

// granularChecks is the checklist's H1 NetworkingTestConfig
// (networking.go, "Granular Checks: Services") built once: a netexec
// endpoint per node (HTTP 8083, UDP 8081), the NodePort Service
// node-port-service (80/TCP, 90/UDP), a test pod on node-c and a
// hostNetwork pod on node-b; node[0] is node-a. Each subtest is one
// upstream `It`: its requests must reach every endpoint, on this node and
// the others, and no stranger.
func (b *bed) granularChecks(t *testing.T) {
	ns := b.testNamespace(t, "nettest")
	sel := map[string]string{"selector-nettest": "true"}
	var want []string
	var netservers []pod
	for i, n := range b.nodes {
		p := b.runPod(t, ns, podSpec{name: fmt.Sprintf("netserver-%d", i), node: n.name, labels: sel,
			netexec: []string{"--http-port=8083", "--udp-port=8081"}, readyPort: 8083})
		want = append(want, p.name)
		netservers = append(netservers, p)
	}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "node-port-service"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt(8083), Protocol: corev1.ProtocolTCP},
			{Name: "udp", Port: 90, TargetPort: intstr.FromInt(8081), Protocol: corev1.ProtocolUDP},
		}}})
	testPod := b.runPod(t, ns, podSpec{name: "test-container-pod", node: "node-c", netexec: []string{"--http-port=9080"}})
	host := b.runPod(t, ns, podSpec{name: "host-test-container-pod", node: "node-b", hostNetwork: true})
	node0 := b.nodes[0]
	maxTries := len(want)*len(want) + 30
	httpNP, udpNP := svc.Spec.Ports[0].NodePort, svc.Spec.Ports[1].NodePort
	overHTTP := func(from pod, addr netip.AddrPort) func() (string, error) {
		return func() (string, error) { return hostnameOverHTTP(from.ns, addr, 15*time.Second) }
	}
	overUDP := func(from pod, addr netip.AddrPort) func() (string, error) {
		return func() (string, error) { return hostnameOverUDP(from.ns, addr, time.Second) }
	}

	// SN-01, SN-02: from a pod (node-c).
	t.Run("should function for pod-Service: http", func(t *testing.T) {
		dialUntilAll(t, "pod -> ClusterIP:80/TCP", want, maxTries, overHTTP(testPod, vip(svc, 80)))
		dialUntilAll(t, "pod -> node-a NodeIP:NodePort/TCP", want, maxTries, overHTTP(testPod, nodePort(node0, httpNP)))
	})
	t.Run("should function for pod-Service: udp", func(t *testing.T) {
		dialUntilAll(t, "pod -> ClusterIP:90/UDP", want, maxTries, overUDP(testPod, vip(svc, 90)))
		dialUntilAll(t, "pod -> node-a NodeIP:NodePort/UDP", want, maxTries, overUDP(testPod, nodePort(node0, udpNP)))
	})
	// SN-03, SN-04: from the node (node-b): host-originated traffic.
	t.Run("should function for node-Service: http", func(t *testing.T) {
		dialUntilAll(t, "node-b -> ClusterIP:80/TCP", want, maxTries, overHTTP(host, vip(svc, 80)))
		dialUntilAll(t, "node-b -> node-a NodeIP:NodePort/TCP", want, maxTries, overHTTP(host, nodePort(node0, httpNP)))
	})
	t.Run("should function for node-Service: udp", func(t *testing.T) {
		dialUntilAll(t, "node-b -> ClusterIP:90/UDP", want, maxTries, overUDP(host, vip(svc, 90)))
		dialUntilAll(t, "node-b -> node-a NodeIP:NodePort/UDP", want, maxTries, overUDP(host, nodePort(node0, udpNP)))
	})
	// SN-05, SN-06: from netserver-0, itself an endpoint (the self-hit is
	// a hairpin), to the VIP and to its own node's NodePort.
	t.Run("should function for endpoint-Service: http", func(t *testing.T) {
		dialUntilAll(t, "netserver-0 -> ClusterIP:80/TCP", want, maxTries, overHTTP(netservers[0], vip(svc, 80)))
		dialUntilAll(t, "netserver-0 -> node-a NodeIP:NodePort/TCP", want, maxTries, overHTTP(netservers[0], nodePort(node0, httpNP)))
	})
	t.Run("should function for endpoint-Service: udp", func(t *testing.T) {
		dialUntilAll(t, "netserver-0 -> ClusterIP:90/UDP", want, maxTries, overUDP(netservers[0], vip(svc, 90)))
		dialUntilAll(t, "netserver-0 -> node-a NodeIP:NodePort/UDP", want, maxTries, overUDP(netservers[0], nodePort(node0, udpNP)))
	})
	// SN-08, SN-09 (H5): a 2000-byte message through the VIP, echoed
	// byte-exact; over UDP the datagram is fragmented on the 1500-byte MTU.
	t.Run("should be able to handle large requests: http", func(t *testing.T) {
		msg := strings.Repeat("42", 1000)
		eventually(t, "pod -> ClusterIP:80/echo 2000 bytes", respondingTimeout, func() error {
			var body string
			err := testPod.ns.Do(func() error {
				var err error
				_, body, err = cluster.HTTPGet(vip(svc, 80), "/echo?msg="+msg, netip.Addr{}, 15*time.Second)
				return err
			})
			if err == nil && body != msg {
				t.Fatalf("echo of %d bytes came back as %d bytes", len(msg), len(body))
			}
			return err
		})
	})
	t.Run("should be able to handle large requests: udp", func(t *testing.T) {
		msg := "n" + strings.Repeat("o", 1999)
		eventually(t, "pod -> ClusterIP:90 echo a 2 KB datagram", respondingTimeout, func() error {
			var got string
			err := testPod.ns.Do(func() error {
				var err error
				got, err = cluster.UDPRequest(vip(svc, 90), "echo "+msg, 2*time.Second)
				return err
			})
			if err == nil && got != msg {
				t.Fatalf("echo of %d bytes came back as %d bytes", len(msg), len(got))
			}
			return err
		})
	})
	b.granularChecksMore(t, netConfig{ns: ns, sel: sel, svc: svc, want: want, netservers: netservers, testPod: testPod, host: host})
}

// sourcePodIP is SN-103 (service.go): a netexec pod behind a ClusterIP on
// node-a; pause pods on node-a and node-b each GET /clientip through the
// ClusterIP and must see their own pod IP (no SNAT on pod -> VIP, on the
// endpoint's node and across nodes).
func (b *bed) sourcePodIP(t *testing.T) {
	ns := b.testNamespace(t, "sourceip")
	sel := map[string]string{"app": "echo"}
	b.runPod(t, ns, podSpec{name: "echo-pod", node: "node-a", labels: sel, netexec: []string{"--http-port=8080"}, readyPort: 8080})
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "sourceip-test"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt(8080)}}}})
	for i, node := range []string{"node-a", "node-b"} {
		p := b.runPod(t, ns, podSpec{name: fmt.Sprintf("pause-pod-%d", i), node: node})
		eventually(t, fmt.Sprintf("%s on %s -> ClusterIP:8080/clientip is its own IP %s", p.name, node, p.ip), respondingTimeout, func() error {
			got, err := clientIP(p.ns, vip(svc, 8080), netip.Addr{}, 30*time.Second)
			if err != nil {
				return err
			}
			if got != p.ip {
				t.Fatalf("%s on %s: the server saw %s, want the pod's own IP %s", p.name, node, got, p.ip)
			}
			return nil
		})
	}
}

// itpClient is one client of an internalTrafficPolicy Local test and
// whether it must reach the endpoint.
type itpClient struct {
	spec  podSpec
	reach bool
}

// itpLocal is the body of SN-57, SN-58 and SN-59 (service.go): one
// endpoint on node-a behind a Service with internalTrafficPolicy Local;
// the clients on node-a reach it (its hostname is want), those on node-b
// get no answer (node-b has no local endpoint), five times each.
func (b *bed) itpLocal(t *testing.T, ns string, endpoint podSpec, port int32, want string, clients []itpClient) {
	sel := map[string]string{"app": endpoint.name}
	endpoint.labels = sel
	b.runPod(t, ns, endpoint)
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "itp-local"},
		Spec: corev1.ServiceSpec{Selector: sel, InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt(endpoint.readyPort)}}}})
	target := vip(svc, port)
	for _, c := range clients {
		p := b.runPod(t, ns, c.spec)
		if c.reach {
			eventually(t, c.spec.name+" -> ClusterIP answered by "+want, respondingTimeout, func() error {
				got, err := hostnameOverHTTP(p.ns, target, 5*time.Second)
				if err == nil && got != want {
					t.Fatalf("%s -> %s answered by %q, want %s", c.spec.name, target, got, want)
				}
				return err
			})
		}
		for i := 0; i < 5; i++ {
			got, err := hostnameOverHTTP(p.ns, target, 5*time.Second)
			switch {
			case c.reach && (err != nil || got != want):
				t.Errorf("%s -> %s try %d: %q, %v; want %s", c.spec.name, target, i, got, err, want)
			case !c.reach && err == nil:
				t.Errorf("%s -> %s try %d: answered by %q; want no answer (no local endpoint on %s)", c.spec.name, target, i, got, c.spec.node)
			}
		}
	}
}

// itpLocalPodToPod is SN-57: pod clients on node-a and node-b.
func (b *bed) itpLocalPodToPod(t *testing.T) {
	ns := b.testNamespace(t, "itp-pod-pod")
	b.itpLocal(t, ns, podSpec{name: "webserver", node: "node-a", netexec: []string{"--http-port=80"}, readyPort: 80}, 80, "webserver",
		[]itpClient{{podSpec{name: "pod0", node: "node-a"}, true}, {podSpec{name: "pod1", node: "node-b"}, false}})
}

// itpLocalHostNetworkToPod is SN-58: hostNetwork clients (the nodes
// themselves) on node-a and node-b, port 8000.
func (b *bed) itpLocalHostNetworkToPod(t *testing.T) {
	ns := b.testNamespace(t, "itp-host-pod")
	b.itpLocal(t, ns, podSpec{name: "webserver", node: "node-a", netexec: []string{"--http-port=8000"}, readyPort: 8000}, 8000, "webserver",
		[]itpClient{{podSpec{name: "pod0", node: "node-a", hostNetwork: true}, true}, {podSpec{name: "pod1", node: "node-b", hostNetwork: true}, false}})
}

// itpLocalHostNetworkEndpoint is SN-59: the endpoint is a hostNetwork
// netexec on node-a (port 10180, answering with node-a's name); pods and
// then the nodes on node-a and node-b.
func (b *bed) itpLocalHostNetworkEndpoint(t *testing.T) {
	ns := b.testNamespace(t, "itp-local")
	b.itpLocal(t, ns, podSpec{name: "hostnet-webserver", node: "node-a", hostNetwork: true,
		netexec: []string{"--http-port=10180"}, readyPort: 10180}, 80, "node-a", []itpClient{
		{podSpec{name: "pod-on-node-a", node: "node-a"}, true},
		{podSpec{name: "pod-on-node-b", node: "node-b"}, false},
		{podSpec{name: "hostnet-on-node-a", node: "node-a", hostNetwork: true}, true},
		{podSpec{name: "hostnet-on-node-b", node: "node-b", hostNetwork: true}, false},
	})
}

// hairpin is SN-104 (service.go): a pod reaches itself through its own
// Service's ClusterIP (H6's ClusterIP leg; the DNS leg needs cluster DNS,
// which the bed has not).
func (b *bed) hairpin(t *testing.T) {
	ns := b.testNamespace(t, "hairpin")
	sel := map[string]string{"app": "hairpin"}
	p := b.runPod(t, ns, podSpec{name: "hairpin", node: "node-a", labels: sel, netexec: []string{"--http-port=8080"}, readyPort: 8080})
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hairpin-test"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt(8080)}}}})
	eventually(t, "hairpin -> its own ClusterIP:8080", respondingTimeout, func() error {
		got, err := hostnameOverHTTP(p.ns, vip(svc, 8080), 2*time.Second)
		if err == nil && got != "hairpin" {
			t.Fatalf("answered by %q, want hairpin", got)
		}
		return err
	})
}

// terminatingFallback is the body of SN-66 and SN-67 (service.go): the
// only endpoint, a netexec on node-a without a readiness probe and a
// 100 s grace period, is deleted, so it is terminating and still serving;
// five times, 5 s apart, pause pods on node-a and node-b ask the ClusterIP
// for its hostname: the one on node-a must get it, the one on node-b must
// get it with internalTrafficPolicy Cluster and no answer with Local.
func (b *bed) terminatingFallback(t *testing.T, ns string, itp corev1.ServiceInternalTrafficPolicy) {
	sel := map[string]string{"app": "echo-hostname"}
	web := b.runPod(t, ns, podSpec{name: "echo-hostname-0", node: "node-a", labels: sel, netexec: []string{"--http-port=80"}, grace: 100})
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-proxy-terminating"},
		Spec: corev1.ServiceSpec{Selector: sel, InternalTrafficPolicy: &itp,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(80)}}}})
	pause0 := b.runPod(t, ns, podSpec{name: "pause-pod-0", node: "node-a"})
	pause1 := b.runPod(t, ns, podSpec{name: "pause-pod-1", node: "node-b"})
	b.deleteAndWaitTerminating(t, ns, web.name, web.ip)
	target := vip(svc, 80)
	for i := 0; i < 5; i++ {
		eventually(t, fmt.Sprintf("try %d: pause-pod-0 -> ClusterIP answered by the terminating %s", i, web.name), respondingTimeout, func() error {
			got, err := hostnameOverHTTP(pause0.ns, target, 5*time.Second)
			if err == nil && got != web.name {
				t.Fatalf("answered by %q, want %s", got, web.name)
			}
			return err
		})
		got, err := hostnameOverHTTP(pause1.ns, target, 5*time.Second)
		switch {
		case itp == corev1.ServiceInternalTrafficPolicyCluster && (err != nil || got != web.name):
			t.Errorf("try %d: pause-pod-1 on node-b: %q, %v; want %s", i, got, err, web.name)
		case itp == corev1.ServiceInternalTrafficPolicyLocal && err == nil:
			t.Errorf("try %d: pause-pod-1 on node-b answered by %q; want no answer (no local endpoint)", i, got)
		}
		time.Sleep(5 * time.Second)
	}
}

// terminatingFallbackCluster is SN-66.
func (b *bed) terminatingFallbackCluster(t *testing.T) {
	b.terminatingFallback(t, b.testNamespace(t, "terminating-cluster"), corev1.ServiceInternalTrafficPolicyCluster)
}

// terminatingFallbackLocal is SN-67.
func (b *bed) terminatingFallbackLocal(t *testing.T) {
	b.terminatingFallback(t, b.testNamespace(t, "terminating-local"), corev1.ServiceInternalTrafficPolicyLocal)
}

// etpLocalNodePort is SN-60 (service.go): a NodePort Service with
// externalTrafficPolicy Local, its one endpoint on node-a; node-b (a
// hostNetwork pod) GETs node-a's NodeIP:NodePort/clientip and the server
// must see node-b's own IP (no SNAT).
func (b *bed) etpLocalNodePort(t *testing.T) {
	ns := b.testNamespace(t, "etp-local")
	sel := map[string]string{"app": "external-local-nodeport"}
	b.runPod(t, ns, podSpec{name: "external-local-nodeport", node: "node-a", labels: sel,
		netexec: []string{"--http-port=8080"}, readyPort: 8080})
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external-local-nodeport"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}})
	exec := b.runPod(t, ns, podSpec{name: "execpod", node: "node-b", hostNetwork: true})
	target := nodePort(b.node(t, "node-a"), svc.Spec.Ports[0].NodePort)
	eventually(t, "node-b -> node-a NodeIP:NodePort/clientip is node-b's IP", respondingTimeout, func() error {
		got, err := clientIP(exec.ns, target, netip.Addr{}, 5*time.Second)
		if err != nil {
			return err
		}
		if got != exec.ip {
			t.Fatalf("node-b -> %s: the server saw %s, want node-b's IP %s (no SNAT)", target, got, exec.ip)
		}
		return nil
	})
}

// etpChangeHealthCheck is SN-61 (service.go): a LoadBalancer Service with
// externalTrafficPolicy Local, its endpoint on E=node-a, the client a
// hostNetwork pod on X=node-b, T=node-c the third node. Each round must
// hold as a whole within 30 s (KubeProxyEndpointLagTimeout):
//   - Local: HealthCheckNodePort 200 on E, 503 on X and T; the NodePort,
//     requested from X's IP, answers on E and X with X's IP as client
//     and not on T;
//   - Cluster: the health check port answers nowhere; the NodePort
//     answers on E, X and T;
//   - Local again with the old health check port: as the first round.
func (b *bed) etpChangeHealthCheck(t *testing.T) {
	ctx := context.Background()
	ns := b.testNamespace(t, "etp-change")
	sel := map[string]string{"app": "external-local-update"}
	b.runPod(t, ns, podSpec{name: "external-local-update", node: "node-a", labels: sel,
		netexec: []string{"--http-port=8080"}, readyPort: 8080})
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external-local-update"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: sel,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}})
	hcnp, np := svc.Spec.HealthCheckNodePort, svc.Spec.Ports[0].NodePort
	if hcnp == 0 {
		t.Fatal("no healthCheckNodePort allocated")
	}
	exec := b.runPod(t, ns, podSpec{name: "execpod", node: "node-b", hostNetwork: true})
	e, x, tn := b.node(t, "node-a"), b.node(t, "node-b"), b.node(t, "node-c")
	const timeout = 2 * time.Second

	healthCheck := func(n *bedNode) (int, error) {
		var code int
		err := exec.ns.Do(func() error {
			var err error
			code, _, err = cluster.HTTPGet(nodePort(n, hcnp), "/", exec.ip, timeout)
			return err
		})
		return code, err
	}
	// A round returns every check that failed, so a failure names them all.
	localRound := func() error {
		var errs []error
		for _, c := range []struct {
			n    *bedNode
			want int
		}{{e, 200}, {x, 503}, {tn, 503}} {
			if code, err := healthCheck(c.n); err != nil || code != c.want {
				errs = append(errs, fmt.Errorf("health check %s:%d: %d %v, want %d", c.n.name, hcnp, code, err, c.want))
			}
		}
		for _, n := range []*bedNode{e, x} {
			got, err := clientIP(exec.ns, nodePort(n, np), exec.ip, timeout)
			if err != nil {
				errs = append(errs, fmt.Errorf("NodePort on %s: %w", n.name, err))
			} else if got != exec.ip {
				errs = append(errs, fmt.Errorf("NodePort on %s: client IP %s, want X's %s", n.name, got, exec.ip))
			}
		}
		if got, err := clientIP(exec.ns, nodePort(tn, np), exec.ip, timeout); err == nil {
			errs = append(errs, fmt.Errorf("NodePort on %s (no local endpoint) answered (client IP %s)", tn.name, got))
		}
		return errors.Join(errs...)
	}
	clusterRound := func() error {
		var errs []error
		for _, n := range []*bedNode{e, x, tn} {
			if code, err := healthCheck(n); err == nil {
				errs = append(errs, fmt.Errorf("health check %s:%d still answers %d with ETP=Cluster", n.name, hcnp, code))
			}
			if _, err := clientIP(exec.ns, nodePort(n, np), exec.ip, timeout); err != nil {
				errs = append(errs, fmt.Errorf("NodePort on %s with ETP=Cluster: %w", n.name, err))
			}
		}
		return errors.Join(errs...)
	}
	update := func(etp corev1.ServiceExternalTrafficPolicy, hc int32) {
		t.Helper()
		s, err := b.client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.ExternalTrafficPolicy, s.Spec.HealthCheckNodePort = etp, hc
		if s, err = b.client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if s.Spec.HealthCheckNodePort != hc {
			t.Fatalf("healthCheckNodePort %d after the update, want %d", s.Spec.HealthCheckNodePort, hc)
		}
	}

	eventually(t, "ETP=Local: HC 200/503/503, NodePort on E and X with X's IP, not on T", kubeProxyEndpointLagTimeout, localRound)
	update(corev1.ServiceExternalTrafficPolicyCluster, 0)
	eventually(t, "ETP=Cluster: no health check anywhere, NodePort on E, X and T", kubeProxyEndpointLagTimeout, clusterRound)
	update(corev1.ServiceExternalTrafficPolicyLocal, hcnp)
	eventually(t, "ETP=Local again on the same health check port", kubeProxyEndpointLagTimeout, localRound)
}
