//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// kubeProxyLagTimeout is the framework's KubeProxyLagTimeout: how long a
// proxy may take to follow a Service change.
const kubeProxyLagTimeout = 2 * time.Minute

// endpointTests are the service.go tests on which pods become endpoints:
// evicted (SN-16), replaced under one named targetPort with another port
// (SN-19), never ready behind publishNotReadyAddresses (SN-62).
func (b *bed) endpointTests(t *testing.T) {
	t.Run("should be rejected for evicted pods (no endpoints exist)", b.evictedPods)
	t.Run("should support named targetPorts that resolve to different ports on different endpoints", b.mutableNamedPort)
	t.Run("should create endpoints for unready pods", b.unreadyPodEndpoints)
	t.Run("should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is true", func(t *testing.T) {
		b.terminatingUnready(t, "pnra-true", true)
	})
	t.Run("should not be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is false", func(t *testing.T) {
		b.terminatingUnready(t, "pnra-false", false)
	})
}

// evictedPods is SN-16: a Service 80 -> 80 with publishNotReadyAddresses,
// and a pod on node-a that node-a's agent evicts (phase Failed, reason
// Evicted, its sandbox gone). Upstream's evicted pod carries no label of
// the Service, so its test is "a Service without endpoints refuses"; the
// bed's pod is selected and first served through the VIP (PNRA or not, a
// terminal pod must leave the slices and the proxy its real server): the
// Service's EndpointSlices then hold no endpoint and a connect from the
// exec pod on node-a to the VIP is REFUSED within 30 s (not a timeout on
// a stale real server).
func (b *bed) evictedPods(t *testing.T) {
	ctx := context.Background()
	ns := b.testNamespace(t, "evicted-pods")
	sel := map[string]string{"testid": "evicted-pods"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "evicted-pods"},
		Spec: corev1.ServiceSpec{Selector: sel, PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(80))}}})
	evicted := b.runPod(t, ns, netserver("evicted-pod", "node-a", sel, 80, 0))
	exec := b.execPod(t, ns, "node-a")
	reachesAll(t, "execpod, before the eviction", exec.ns, vip(svc, 80), []string{evicted.name})

	if err := b.node(t, "node-a").agent.evict(ctx, ns, evicted.name); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod Failed, Evicted", podStartTimeout, func() error {
		p, err := b.client.CoreV1().Pods(ns).Get(ctx, evicted.name, metav1.GetOptions{})
		if err == nil && (p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Evicted") {
			err = fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
		}
		return err
	})
	eventually(t, "no endpoint in the Service's slices", time.Minute, func() error {
		if n := b.endpointCount(ctx, ns, svc.Name); n != 0 {
			return fmt.Errorf("%d endpoints", n)
		}
		return nil
	})
	eventually(t, "execpod -> VIP:80 REFUSED", kubeProxyEndpointLagTimeout, func() error {
		return refused(exec.ns, vip(svc, 80))
	})
}

// endpointCount is the number of endpoints in the EndpointSlices of
// Service svc.
func (b *bed) endpointCount(ctx context.Context, ns, svc string) int {
	list, err := b.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return -1
	}
	n := 0
	for _, s := range list.Items {
		n += len(s.Endpoints)
	}
	return n
}

// mutableNamedPort is SN-19: testpod0 (node-a) and testpod1 (node-b)
// name port 8080 "mutable-port"; the Service 8001 -> "mutable-port".
// Both answer through the VIP; testpod0 replaced by testpod2 (node-a)
// naming 8000: testpod1 and testpod2 answer (one service port, real
// servers on two ports) and nobody else; testpod1 replaced by testpod3
// (node-b) on 8000: testpod2 and testpod3.
func (b *bed) mutableNamedPort(t *testing.T) {
	ns := b.testNamespace(t, "mutable-named-port")
	sel := map[string]string{"testid": "mutable-named-port"}
	mutable := func(name, node string, port int32) {
		p := netserver(name, node, sel, int(port), 0)
		p.ports = []corev1.ContainerPort{{Name: "mutable-port", ContainerPort: port, Protocol: corev1.ProtocolTCP}}
		b.runPod(t, ns, p)
	}
	mutable("testpod0", "node-a", 8080)
	mutable("testpod1", "node-b", 8080)
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "mutable-named-port"},
		Spec: corev1.ServiceSpec{Selector: sel,
			Ports: []corev1.ServicePort{tcpPort("mutable-named-port", 8001, intstr.FromString("mutable-port"))}}})
	exec := b.execPod(t, ns, "node-c")
	reachesAll(t, "execpod", exec.ns, vip(svc, 8001), []string{"testpod0", "testpod1"})

	b.deletePodNow(t, ns, "testpod0")
	mutable("testpod2", "node-a", 8000)
	reachesAll(t, "execpod, testpod0 -> testpod2 on 8000", exec.ns, vip(svc, 8001), []string{"testpod1", "testpod2"})

	b.deletePodNow(t, ns, "testpod1")
	mutable("testpod3", "node-b", 8000)
	reachesAll(t, "execpod, testpod1 -> testpod3 on 8000", exec.ns, vip(svc, 8001), []string{"testpod2", "testpod3"})
}

// unreadyPodEndpoints is SN-62: a Service 80 -> 80 with
// publishNotReadyAddresses over one netexec pod on node-a whose readiness
// probe is `/bin/false` (never Ready) and whose grace period is 100 s
// (upstream: a preStop sleep 100; the agent serves a deleted pod for its
// grace period). The exec pod on node-b reaches it through the VIP; the
// pod deleted (the Deployment scaled to 0) and PNRA off: the VIP stops
// answering; PNRA on again: the terminating, unready pod answers again.
// Each within KubeProxyLagTimeout, 2 min.
func (b *bed) unreadyPodEndpoints(t *testing.T) {
	ctx := context.Background()
	ns := b.testNamespace(t, "tolerate-unready")
	sel := map[string]string{"testid": "tolerate-unready"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "tolerate-unready"},
		Spec: corev1.ServiceSpec{Selector: sel, PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(80))}}})
	name := "slow-terminating-unready-pod"
	b.startPodObject(t, ns, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: sel},
		Spec: corev1.PodSpec{NodeName: "node-a", TerminationGracePeriodSeconds: ptr.To(int64(100)),
			Containers: []corev1.Container{{Name: name, Image: agnhost, Args: []string{"netexec", "--http-port=80"},
				Ports:          []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/false"}}}},
			}}}}, false)
	exec := b.execPod(t, ns, "node-b")
	answers := func(what string) {
		t.Helper()
		eventually(t, what, kubeProxyLagTimeout, func() error {
			got, err := hostnameOverHTTP(exec.ns, vip(svc, 80), 2*time.Second)
			if err == nil && got != name {
				t.Fatalf("%s: answered by %q", what, got)
			}
			return err
		})
	}
	answers("execpod -> VIP:80, the unready pod (PNRA)")
	p, err := b.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			t.Fatalf("pod %s Ready with readiness /bin/false", name)
		}
	}

	if err := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = false })
	goesDown(t, "execpod, PNRA off", exec.ns, vip(svc, 80), kubeProxyLagTimeout)

	b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true })
	answers("execpod -> VIP:80, the terminating unready pod (PNRA again)")
	b.deletePodNow(t, ns, name)
}

// terminatingUnready is SN-63 (pnra) and SN-64 (!pnra): a NodePort
// Service svc-tolerate-unready (80 -> 80) over webserver-pod on node-a,
// agnhost netexec with --delay-shutdown=300, readiness GET /readyz, grace
// 300 s; a pause pod on node-b. The webserver deleted: it turns unready
// (its /readyz 503) and keeps serving. SN-63: five rounds 5 s apart, the
// pause pod reaches it through the VIP and the NodePorts of node-a and
// node-b (each answered by it within 2 min: execHostnameTest). SN-64:
// both NodePorts stop answering within 30 s, then five rounds of the three
// addresses all fail (`curl --connect-timeout 5`).
func (b *bed) terminatingUnready(t *testing.T, ns string, pnra bool) {
	ctx := context.Background()
	ns = b.testNamespace(t, ns)
	sel := map[string]string{"testid": "svc-tolerate-unready"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-tolerate-unready"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel, PublishNotReadyAddresses: pnra,
			Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(80))}}})
	const name = "webserver-pod"
	b.runPodObject(t, ns, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: sel},
		Spec: corev1.PodSpec{NodeName: "node-a", TerminationGracePeriodSeconds: ptr.To(int64(300)),
			Containers: []corev1.Container{{Name: "agnhost", Image: agnhost,
				Args:           []string{"netexec", "--http-port=80", "--delay-shutdown=300"},
				Ports:          []corev1.ContainerPort{{ContainerPort: 80}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(80)}}},
			}}}})
	eventually(t, "one endpoint", time.Minute, func() error {
		if n := b.endpointCount(ctx, ns, svc.Name); n != 1 {
			return fmt.Errorf("%d endpoints", n)
		}
		return nil
	})
	pause := b.runPod(t, ns, podSpec{name: "pause-pod-1", node: "node-b"})
	t.Cleanup(func() { b.deletePodNow(t, ns, name) })

	if err := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, name+" not ready", podStartTimeout, func() error {
		p, err := b.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return errNotYet
			}
		}
		return nil
	})
	np := svc.Spec.Ports[0].NodePort
	vipAddr, np0, np1 := vip(svc, 80), nodePort(b.node(t, "node-a"), np), nodePort(b.node(t, "node-b"), np)
	if !pnra {
		goesDown(t, "pause-pod-1, node-a's NodePort", pause.ns, np0, kubeProxyEndpointLagTimeout)
		goesDown(t, "pause-pod-1, node-b's NodePort", pause.ns, np1, kubeProxyEndpointLagTimeout)
	}
	for i := 0; i < 5; i++ {
		for _, a := range []netip.AddrPort{vipAddr, np0, np1} {
			what := fmt.Sprintf("round %d: pause-pod-1 -> %s", i, a)
			if !pnra {
				if got, err := hostnameOverHTTP(pause.ns, a, 5*time.Second); err == nil {
					t.Errorf("%s: answered by %q; want no answer", what, got)
				}
				continue
			}
			eventually(t, what+" answered by "+name, 2*time.Minute, func() error {
				got, err := hostnameOverHTTP(pause.ns, a, 30*time.Second)
				if err == nil && got != name {
					t.Fatalf("%s: answered by %q", what, got)
				}
				return err
			})
		}
		time.Sleep(5 * time.Second)
	}
}
