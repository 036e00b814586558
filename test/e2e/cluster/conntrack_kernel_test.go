//go:build kernel

package cluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// conntrackTests are the checklist's UDP flows across a server pod's
// life (conntrack.go, "Conntrack"): a client that keeps one 5-tuple
// (a fixed source port) must follow the Service to its new endpoint,
// so the proxy must flush what the kernel remembers of the flow (IPVS
// connection entries and conntrack) when an endpoint goes or becomes
// usable.
func (b *bed) conntrackTests(t *testing.T) {
	t.Run("should be able to preserve UDP traffic when server pod cycles for a NodePort service", func(t *testing.T) {
		b.udpServerCycles(t, "conntrack-nodeport", corev1.ServiceTypeNodePort, false)
	})
	t.Run("should be able to preserve UDP traffic when server pod cycles for a ClusterIP service", func(t *testing.T) {
		b.udpServerCycles(t, "conntrack-clusterip", corev1.ServiceTypeClusterIP, false)
	})
	t.Run("should be able to preserve UDP traffic when server pod cycles for a ClusterIP service and client is hostNetwork", func(t *testing.T) {
		b.udpServerCycles(t, "conntrack-hostnet", corev1.ServiceTypeClusterIP, true)
	})
	t.Run("should be able to preserve UDP traffic when server pod cycles for a ClusterIP service with InternalTrafficPolicy set to Local", b.udpITPLocalCycles)
	t.Run("should be able to preserve UDP traffic when initial unready endpoints get ready", b.udpUnreadyGetsReady)
}

// udpITPLocalCycles is SN-92 (regression kubernetes#126934): a UDP
// ClusterIP Service with internalTrafficPolicy Local over a "DaemonSet"
// (a netexec pod per node, UDP 80); the client on node-a must hear
// node-a's pod; that pod is deleted (upstream: --delay-shutdown=10, so it
// serves 10 s more as terminating) and replaced on node-a, as the
// DaemonSet controller does: the client must hear the new pod within a
// minute.
func (b *bed) udpITPLocalCycles(t *testing.T) {
	ctx := context.Background()
	ns := b.testNamespace(t, "conntrack-itp-local")
	sel := map[string]string{"app": "udp-ds"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-udp"},
		Spec: corev1.ServiceSpec{Selector: sel, InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			Ports: []corev1.ServicePort{udpPort("udp", 80, intstr.FromInt(80))}}})
	for _, n := range nodeNames {
		b.runPod(t, ns, netserver("ds-"+n, n, sel, 8080, 80))
	}
	client := b.runPod(t, ns, podSpec{name: "pod-client", node: "node-a"})
	loop := startUDPLoop(t, client.ns, 12345, vip(svc, 80))
	seen := loop.waitFor(t, "ds-node-a", 0, time.Minute)
	if err := b.client.CoreV1().Pods(ns).Delete(ctx, "ds-node-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(10))}); err != nil {
		t.Fatal(err)
	}
	b.runPod(t, ns, netserver("ds-node-a-2", "node-a", sel, 8080, 80))
	loop.waitFor(t, "ds-node-a-2", seen, time.Minute)
}

// udpServerCycles is SN-90 (NodePort: the client targets node-b's
// NodePort), SN-91 (ClusterIP) and SN-93 (ClusterIP, the client on
// node-a's own namespace): a UDP Service 80 -> 80; the client on node-a
// sends from port 12345 before any endpoint exists; backend1 on node-b
// must be heard within a minute; backend2 on node-b is added and backend1
// deleted: backend2 must be heard within a minute.
func (b *bed) udpServerCycles(t *testing.T, ns string, typ corev1.ServiceType, hostClient bool) {
	ns = b.testNamespace(t, ns)
	sel := map[string]string{"app": "udp-backend"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-udp"},
		Spec: corev1.ServiceSpec{Type: typ, Selector: sel, Ports: []corev1.ServicePort{udpPort("udp", 80, intstr.FromInt(80))}}})
	target := vip(svc, 80)
	if typ == corev1.ServiceTypeNodePort {
		target = nodePort(b.node(t, "node-b"), svc.Spec.Ports[0].NodePort)
	}
	client := b.runPod(t, ns, podSpec{name: "pod-client", node: "node-a", hostNetwork: hostClient})
	loop := startUDPLoop(t, client.ns, 12345, target)
	t.Logf("client %s:12345 -> %s", client.ip, target)

	b.runPod(t, ns, netserver("pod-server-1", "node-b", sel, 8080, 80))
	seen := loop.waitFor(t, "pod-server-1", 0, time.Minute)
	b.runPod(t, ns, netserver("pod-server-2", "node-b", sel, 8080, 80))
	b.deletePodNow(t, ns, "pod-server-1")
	loop.waitFor(t, "pod-server-2", seen, time.Minute)
}

// udpUnreadyGetsReady is SN-94 (regression kubernetes#105657): the client
// on node-a sends to VIP:80/UDP from port 12345 while backend1 on node-b
// exists but is not ready (upstream: 15 s in an init container; here its
// readiness probe's port stays closed for 15 s, then opens): backend1
// must be heard within a minute of turning ready.
func (b *bed) udpUnreadyGetsReady(t *testing.T) {
	ctx := context.Background()
	ns := b.testNamespace(t, "conntrack-unready")
	sel := map[string]string{"app": "udp-backend"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-udp"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{udpPort("udp", 80, intstr.FromInt(80))}}})
	client := b.runPod(t, ns, podSpec{name: "pod-client", node: "node-a"})
	loop := startUDPLoop(t, client.ns, 12345, vip(svc, 80))

	const readyPort = 8081
	if _, err := b.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-server-1", Labels: sel},
		Spec: corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c", Image: agnhost,
			Args: []string{"netexec", "--http-port=8080", "--udp-port=80"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt(readyPort)}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var server *pod
	eventually(t, "pod-server-1 running, not ready", podStartTimeout, func() error {
		ns, ip, ok := b.node(t, "node-b").agent.podNS(ns, "pod-server-1")
		if !ok {
			return errNotYet
		}
		server = &pod{name: "pod-server-1", ns: ns, ip: ip}
		return nil
	})
	time.Sleep(15 * time.Second)
	if n := loop.count(); n != 0 {
		t.Fatalf("the client got %d answers while the only endpoint was not ready", n)
	}
	var stop func()
	if err := server.ns.Do(func() error {
		var err error
		stop, err = cluster.Netexec{Hostname: "readiness", HTTPPort: readyPort}.Listen()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	loop.waitFor(t, "pod-server-1", 0, time.Minute)
}
