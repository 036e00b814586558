//go:build kernel

package cluster_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// netConfig is the H1 NetworkingTestConfig granularChecks builds: a
// netexec endpoint per node (HTTP 8083, UDP 8081) selected by sel, the
// NodePort Service node-port-service, the test pod on node-c and the
// hostNetwork pod on node-b.
type netConfig struct {
	ns         string
	sel        map[string]string
	svc        *corev1.Service
	want       []string
	netservers []pod
	testPod    pod
	host       pod
}

// h1Ports are node-port-service's ports: 80/TCP -> 8083, 90/UDP -> 8081.
func h1Ports() []corev1.ServicePort {
	return []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(8083)), udpPort("udp", 90, intstr.FromInt(8081))}
}

// granularChecksMore are the rest of the Granular Checks on the same
// config; the last two delete endpoints, so they run last.
func (b *bed) granularChecksMore(t *testing.T, c netConfig) {
	node0 := b.nodes[0]
	// SN-28: from the node, UDP NodePort, every endpoint.
	t.Run("should support basic nodePort: udp functionality", func(t *testing.T) {
		reachesAllUDP(t, "node-b", c.host.ns, nodePort(node0, c.svc.Spec.Ports[1].NodePort), c.want)
	})
	// SN-49, SN-50: session-affinity-service, ClientIP: 10 requests from
	// the test pod, one endpoint.
	aff := b.createService(t, c.ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "session-affinity-service"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: c.sel, SessionAffinity: corev1.ServiceAffinityClientIP, Ports: h1Ports()}})
	oneEndpoint := func(t *testing.T, what string, try func() (string, error)) {
		eventually(t, what+" answers", respondingTimeout, func() error { _, err := try(); return err })
		seen := map[string]int{}
		for i := 0; i < 10; i++ {
			got, err := try()
			if err != nil {
				t.Fatalf("%s try %d: %v", what, i, err)
			}
			seen[got]++
		}
		if len(seen) != 1 {
			t.Fatalf("%s: 10 requests answered by %v, want one endpoint (ClientIP affinity)", what, seen)
		}
	}
	t.Run("should function for client IP based session affinity: http [LinuxOnly]", func(t *testing.T) {
		oneEndpoint(t, "test pod -> session-affinity-service:80/TCP", func() (string, error) {
			return hostnameOverHTTP(c.testPod.ns, vip(aff, 80), 5*time.Second)
		})
	})
	t.Run("should function for client IP based session affinity: udp [LinuxOnly]", func(t *testing.T) {
		oneEndpoint(t, "test pod -> session-affinity-service:90/UDP", func() (string, error) {
			return hostnameOverUDP(c.testPod.ns, vip(aff, 90), time.Second)
		})
	})
	// SN-07: two more Services with the same selector; from netserver-0
	// both reach every endpoint; one is deleted: the other still does.
	t.Run("should function for multiple endpoint-Services with same selector", func(t *testing.T) {
		var svcs []*corev1.Service
		for _, name := range []string{"node-port-service-1", "node-port-service-2"} {
			svcs = append(svcs, b.createService(t, c.ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: c.sel, Ports: h1Ports()}}))
		}
		from := c.netservers[0].ns
		for _, s := range svcs {
			reachesAll(t, "netserver-0", from, vip(s, 80), c.want)
			reachesAll(t, "netserver-0", from, nodePort(node0, s.Spec.Ports[0].NodePort), c.want)
		}
		b.deleteService(t, c.ns, svcs[0].Name)
		goesDown(t, "netserver-0", from, vip(svcs[0], 80), kubeProxyEndpointLagTimeout)
		reachesAll(t, "netserver-0", from, vip(svcs[1], 80), c.want)
		reachesAll(t, "netserver-0", from, nodePort(node0, svcs[1].Spec.Ports[0].NodePort), c.want)
	})
	// SN-27, SN-29: a NodePort Service of the same endpoints, reached
	// from the node, deleted: ten tries get no answer.
	updateNodePort := func(t *testing.T, name string, udp bool) {
		s := b.createService(t, c.ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: c.sel, Ports: h1Ports()}})
		target := nodePort(node0, s.Spec.Ports[0].NodePort)
		if udp {
			target = nodePort(node0, s.Spec.Ports[1].NodePort)
			reachesAllUDP(t, "node-b", c.host.ns, target, c.want)
		} else {
			reachesAll(t, "node-b", c.host.ns, target, c.want)
		}
		b.deleteService(t, c.ns, name)
		time.Sleep(kubeProxyLagAfterDelete)
		for i := 0; i < 10; i++ {
			var got string
			var err error
			if udp {
				got, err = hostnameOverUDP(c.host.ns, target, time.Second)
			} else {
				got, err = hostnameOverHTTP(c.host.ns, target, 5*time.Second)
			}
			if err == nil {
				t.Errorf("node-b -> deleted NodePort %s try %d: answered by %q", target, i, got)
			}
			time.Sleep(time.Second)
		}
	}
	t.Run("should update nodePort: http", func(t *testing.T) { updateNodePort(t, "node-port-update-http", false) })
	t.Run("should update nodePort: udp", func(t *testing.T) { updateNodePort(t, "node-port-update-udp", true) })

	t.Run("should function for service endpoints using hostNetwork", b.hostNetworkEndpoints)

	// SN-96, SN-97: an endpoint deleted (netserver-0 over TCP, then
	// netserver-1 over UDP): it must never answer again, the others must.
	t.Run("should update endpoints: http", func(t *testing.T) {
		reachesAll(t, "test pod", c.testPod.ns, vip(c.svc, 80), c.want)
		b.deletePodNow(t, c.ns, c.netservers[0].name)
		onlyFrom(t, "test pod -> ClusterIP:80/TCP", c.want[1:], func() (string, error) {
			return hostnameOverHTTP(c.testPod.ns, vip(c.svc, 80), 5*time.Second)
		})
	})
	t.Run("should update endpoints: udp", func(t *testing.T) {
		rest := c.want[1:]
		reachesAllUDP(t, "test pod", c.testPod.ns, vip(c.svc, 90), rest)
		b.deletePodNow(t, c.ns, c.netservers[1].name)
		onlyFrom(t, "test pod -> ClusterIP:90/UDP", rest[1:], func() (string, error) {
			return hostnameOverUDP(c.testPod.ns, vip(c.svc, 90), time.Second)
		})
	})
}

// kubeProxyLagAfterDelete is the upstream tests' sleep after deleting the
// NodePort Service (networking.go: 15 s) before the "no answer" tries.
const kubeProxyLagAfterDelete = 15 * time.Second

// onlyFrom is H2 with minTries = maxTries = n²+30: every try answered by
// one of want (a try may fail: the deleted endpoint's connection), every
// name of want seen.
func onlyFrom(t *testing.T, what string, want []string, try func() (string, error)) {
	t.Helper()
	seen := map[string]bool{}
	tries := len(want)*len(want) + 30
	for i := 0; i < tries; i++ {
		got, err := try()
		if err == nil && !slices.Contains(want, got) {
			t.Fatalf("%s try %d: answered by %q, not one of %v", what, i, got, want)
		}
		if err == nil {
			seen[got] = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(seen) != len(want) {
		t.Fatalf("%s: %d tries saw %v, want all of %v", what, tries, seen, want)
	}
}

// hostNetworkEndpoints is SN-10 ("should function for service endpoints
// using hostNetwork"): the endpoints are hostNetwork netexec pods, one per
// node (answering with the node's name); from the test pod and from the
// node, over HTTP and UDP, to the VIP and node-a's NodePort, every
// endpoint answers (H5's large requests are left out).
func (b *bed) hostNetworkEndpoints(t *testing.T) {
	ns := b.testNamespace(t, "nettest-hostnet")
	sel := map[string]string{"selector-hostnet": "true"}
	var want []string
	for i, n := range b.nodes {
		b.runPod(t, ns, podSpec{name: fmt.Sprintf("netserver-%d", i), node: n.name, labels: sel, hostNetwork: true,
			// As upstream: UDP bound to $(HOST_IP),$(POD_IPS), the node's IP.
			netexec: []string{"--http-port=8083", "--udp-port=8081", "--udp-listen-addresses=" + n.ip.String()}, readyPort: 8083})
		want = append(want, n.name)
	}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "node-port-service"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel, Ports: h1Ports()}})
	testPod := b.runPod(t, ns, podSpec{name: "test-container-pod", node: "node-c", netexec: []string{"--http-port=9080"}})
	host := b.runPod(t, ns, podSpec{name: "host-test-container-pod", node: "node-b", hostNetwork: true})
	node0 := b.nodes[0]
	targets := func(from string, ns *ktest.NS) {
		reachesAll(t, from, ns, vip(svc, 80), want)
		reachesAll(t, from, ns, nodePort(node0, svc.Spec.Ports[0].NodePort), want)
		reachesAllUDP(t, from, ns, vip(svc, 90), want)
		reachesAllUDP(t, from, ns, nodePort(node0, svc.Spec.Ports[1].NodePort), want)
	}
	targets("test pod", testPod.ns)
	targets("node-b", host.ns)
}
