//go:build kernel

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// topologyTests are topology_hints.go's and traffic_distribution.go's
// single-node-per-zone tests:
// each node is its own zone (zone-a, zone-b, zone-c) for the length of
// the tests.
func (b *bed) topologyTests(t *testing.T) {
	b.zones(t)
	t.Run("should distribute endpoints evenly", b.distributeEvenly)
	t.Run("should route traffic to an endpoint in the same zone when using PreferClose", func(t *testing.T) {
		b.sameZone(t, "prefer-close", corev1.ServiceTrafficDistributionPreferClose)
	})
	t.Run("should route traffic to an endpoint in the same zone when using PreferSameZone", func(t *testing.T) {
		b.sameZone(t, "prefer-same-zone", corev1.ServiceTrafficDistributionPreferSameZone)
	})
}

// zones labels node-X with topology.kubernetes.io/zone=zone-X and takes
// the labels off at the end.
func (b *bed) zones(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	label := func(n *bedNode, zone any) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{corev1.LabelTopologyZone: zone}}})
		if _, err := b.client.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("label %s with zone %v: %v", n.name, zone, err)
		}
	}
	for _, n := range b.nodes {
		label(n, "zone-"+n.name[len("node-"):])
	}
	t.Cleanup(func() {
		for _, n := range b.nodes {
			label(n, nil)
		}
	})
}

// sameZone is SN-72 (PreferClose) and SN-74 (PreferSameZone): servers in
// zone-a and zone-b, clients in all three zones: the client in zone-a
// only ever reaches zone-a's server, zone-b's only zone-b's, zone-c's
// (no server in its zone) both.
func (b *bed) sameZone(t *testing.T, name, dist string) {
	ns := b.testNamespace(t, name)
	sel := map[string]string{"app": "traffic-dist"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "traffic-dist-test-service"},
		Spec: corev1.ServiceSpec{Selector: sel, TrafficDistribution: &dist,
			Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(9376))}}})
	_, names := b.runPods(t, ns, "server", sel, 9376, 0, "node-a", "node-b")
	for i, node := range nodeNames {
		c := b.runPod(t, ns, podSpec{name: "client-" + node, node: node})
		if i < len(names) {
			answeredOnlyBy(t, fmt.Sprintf("client in zone-%s", node[len("node-"):]), c.ns, vip(svc, 80), names[i])
			// Upstream wants 10 consecutive answers from the zone's server.
			for try := 0; try < 10; try++ {
				if got, err := hostnameOverHTTP(c.ns, vip(svc, 80), 5*time.Second); err != nil || got != names[i] {
					t.Errorf("%s try %d: %q, %v; want %s (same zone)", c.name, try, got, err, names[i])
				}
			}
			continue
		}
		reachesAll(t, "client in zone-c (no server)", c.ns, vip(svc, 80), names)
	}
}

// distributeEvenly is SN-71 (Topology Hints): a serve-hostname pod on
// every node (the DaemonSet), a Service annotated topology-mode Auto with
// publishNotReadyAddresses; the nodes have equal allocatable CPU. Every
// endpoint gets its zone and exactly one hint, its own zone (the
// endpointslice controller's topology cache); from a client pod in each
// zone, the Service is answered only by that zone's pod (upstream: the
// last 5 of its once-a-second requests).
func (b *bed) distributeEvenly(t *testing.T) {
	ns := b.testNamespace(t, "topology-hints")
	sel := map[string]string{"topology-hints": "client"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "topology-hints",
		Annotations: map[string]string{corev1.AnnotationTopologyMode: "Auto"}},
		Spec: corev1.ServiceSpec{Selector: sel, PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{tcpPort("example", 80, intstr.FromInt(9376))}}})
	_, names := b.runPods(t, ns, "topology-serve-hostname", sel, 9376, 0, nodeNames...)
	ctx := context.Background()
	var last string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := b.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		if err != nil {
			return false, err
		}
		n := 0
		last = ""
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				n++
				switch {
				case e.Zone == nil:
					last = fmt.Sprintf("endpoint %v has no zone", e.Addresses)
				case e.Hints == nil || len(e.Hints.ForZones) != 1:
					last = fmt.Sprintf("endpoint %v in %s: hints %v, want exactly one", e.Addresses, *e.Zone, e.Hints)
				case e.Hints.ForZones[0].Name != *e.Zone:
					last = fmt.Sprintf("endpoint %v in %s is hinted for %s", e.Addresses, *e.Zone, e.Hints.ForZones[0].Name)
				}
			}
		}
		if n != len(nodeNames) {
			last = fmt.Sprintf("%d endpoints, want %d", n, len(nodeNames))
		}
		return last == "", nil
	}); err != nil {
		t.Fatalf("slices of %s/%s: %v (last: %s)", ns, svc.Name, err, last)
	}
	for i, node := range nodeNames {
		c := b.runPod(t, ns, podSpec{name: "curl-from-zone-" + node[len("node-"):], node: node})
		answeredOnlyBy(t, c.name, c.ns, vip(svc, 80), names[i])
	}
}
