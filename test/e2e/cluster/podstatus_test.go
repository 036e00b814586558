package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestWritePodStatusReadinessGates: a pod whose probe passes is not Ready
// while its readiness gate's condition is missing or False (its
// ContainersReady is True), becomes Ready once the gate's owner patches
// the condition True, as upstream's blue-green test does, and unready again
// when it goes False; a write that changes nothing leaves the Pod's
// resourceVersion alone (the agent's own writes wake it, and must not loop).
func TestWritePodStatusReadinessGates(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(srv.Config())
	const ns, gate = "readiness-gates", "k8s.io/blue-green"
	createNamespace(ctx, t, client, ns)
	if _, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "blue-pod"},
		Spec: corev1.PodSpec{NodeName: "node-a", ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}},
			Containers: []corev1.Container{{Name: "agnhost", Image: "agnhost"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status := cluster.PodStatus{PodIPs: []netip.Addr{netip.MustParseAddr("10.244.1.7")}, HostIP: netip.MustParseAddr("192.168.50.11"), Ready: true}
	write := func() *corev1.Pod {
		t.Helper()
		pod, err := cluster.WritePodStatus(ctx, client, ns, "blue-pod", status)
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	check := func(what string, pod *corev1.Pod, ready corev1.ConditionStatus) {
		t.Helper()
		got := map[corev1.PodConditionType]corev1.ConditionStatus{}
		for _, c := range pod.Status.Conditions {
			got[c.Type] = c.Status
		}
		if got[corev1.PodReady] != ready || got[corev1.ContainersReady] != corev1.ConditionTrue {
			t.Errorf("%s: Ready %q ContainersReady %q, want %q and True", what, got[corev1.PodReady], got[corev1.ContainersReady], ready)
		}
	}
	pod := write()
	check("gate condition missing", pod, corev1.ConditionFalse)
	if again := write(); again.ResourceVersion != pod.ResourceVersion {
		t.Errorf("a write changing nothing moved resourceVersion %s to %s", pod.ResourceVersion, again.ResourceVersion)
	}
	for _, v := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse} {
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q}]}}`, gate, v)
		if _, err := client.CoreV1().Pods(ns).Patch(ctx, "blue-pod", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		check("gate "+string(v), write(), v)
	}
}
