//go:build kernel

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// topologyTests are traffic_distribution.go's single-node-per-zone tests:
// each node is its own zone (zone-a, zone-b, zone-c) for the length of
// the tests.
func (b *bed) topologyTests(t *testing.T) {
	b.zones(t)
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
