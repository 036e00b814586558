//go:build kernel

package cluster_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// terminatingTests are the checklist's terminating-endpoint tests on
// external traffic (service.go): the only endpoint, on node-a, is deleted
// with a 100 s grace period (the agent keeps it serving; the endpointslice
// controller marks it serving and terminating, not ready).
func (b *bed) terminatingTests(t *testing.T) {
	t.Run("should fallback to terminating endpoints when there are no ready endpoints with externallTrafficPolicy=Cluster", func(t *testing.T) {
		b.terminatingNodePort(t, b.testNamespace(t, "terminating-etp-cluster"), corev1.ServiceExternalTrafficPolicyCluster)
	})
	t.Run("should fallback to local terminating endpoints when there are no ready endpoints with externalTrafficPolicy=Local", func(t *testing.T) {
		b.terminatingNodePort(t, b.testNamespace(t, "terminating-etp-local"), corev1.ServiceExternalTrafficPolicyLocal)
	})
	t.Run("should fail health check node port if there are only terminating endpoints", b.healthCheckTerminating)
}

// terminatingNodePort is SN-68 (Cluster) and SN-69 (Local): a NodePort
// Service with that externalTrafficPolicy, pause pods on node-a and node-b;
// five times, 5 s apart, both reach node-a's NodePort (the terminating
// endpoint); with Local, node-a's pod must get no answer from node-b's
// NodePort (external traffic there, no local endpoint).
func (b *bed) terminatingNodePort(t *testing.T, ns string, etp corev1.ServiceExternalTrafficPolicy) {
	sel := map[string]string{"app": "echo-hostname"}
	web := b.runPod(t, ns, podSpec{name: "echo-hostname-0", node: "node-a", labels: sel, netexec: []string{"--http-port=80"}, grace: 100})
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-proxy-terminating"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel, ExternalTrafficPolicy: etp,
			Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(80))}}})
	pause0 := b.runPod(t, ns, podSpec{name: "pause-pod-0", node: "node-a"})
	pause1 := b.runPod(t, ns, podSpec{name: "pause-pod-1", node: "node-b"})
	np := svc.Spec.Ports[0].NodePort
	onA, onB := nodePort(b.node(t, "node-a"), np), nodePort(b.node(t, "node-b"), np)
	b.deleteAndWaitTerminating(t, ns, web.name, web.ip)
	for i := 0; i < 5; i++ {
		for _, c := range []pod{pause0, pause1} {
			eventually(t, fmt.Sprintf("try %d: %s -> node-a's NodePort answered by the terminating %s", i, c.name, web.name), respondingTimeout, func() error {
				got, err := hostnameOverHTTP(c.ns, onA, 5*time.Second)
				if err == nil && got != web.name {
					t.Fatalf("answered by %q, want %s", got, web.name)
				}
				return err
			})
		}
		if etp == corev1.ServiceExternalTrafficPolicyLocal {
			if got, err := hostnameOverHTTP(pause0.ns, onB, 5*time.Second); err == nil {
				t.Errorf("try %d: pause-pod-0 -> node-b's NodePort answered by %q; want no answer (ETP Local, no endpoint on node-b)", i, got)
			}
		}
		time.Sleep(5 * time.Second)
	}
}

// healthCheckTerminating is SN-65: a LoadBalancer Service (no ingress
// needed) with externalTrafficPolicy Local, its endpoint on node-a; a pod
// on node-a reads node-a's health check node port: 200, then 503 once the
// endpoint is terminating, while node-a's NodePort still reaches it.
func (b *bed) healthCheckTerminating(t *testing.T) {
	ns := b.testNamespace(t, "hc-terminating")
	sel := map[string]string{"app": "echo-hostname"}
	web := b.runPod(t, ns, podSpec{name: "echo-hostname-0", node: "node-a", labels: sel, netexec: []string{"--http-port=80"}, grace: 100})
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-hc-terminating"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: sel,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports:                 []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(80))}}})
	client := b.runPod(t, ns, podSpec{name: "pause-pod-0", node: "node-a"})
	a := b.node(t, "node-a")
	hc := nodePort(a, svc.Spec.HealthCheckNodePort)
	healthz := func(want int) func() error {
		return func() error {
			var code int
			err := client.ns.Do(func() error {
				var err error
				code, _, err = cluster.HTTPGet(hc, "/healthz", client.ip, 5*time.Second)
				return err
			})
			if err == nil && code != want {
				return fmt.Errorf("status %d", code)
			}
			return err
		}
	}
	eventually(t, "node-a's health check node port answers 200", time.Minute, healthz(200))
	b.deleteAndWaitTerminating(t, ns, web.name, web.ip)
	eventually(t, "node-a's health check node port answers 503 (only a terminating endpoint)", time.Minute, healthz(503))
	answeredOnlyBy(t, "pause-pod-0", client.ns, nodePort(a, svc.Spec.Ports[0].NodePort), web.name)
}
