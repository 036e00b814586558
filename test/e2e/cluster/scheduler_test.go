package cluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestScheduler: a Pod created without spec.nodeName is bound by the
// in-process kube-scheduler to the one node whose capacity and labels
// fit it (a node selector rules the other out), as the upstream e2e
// tests' pods are.
func TestScheduler(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(srv.Config())
	const ns = "scheduler"
	createNamespace(ctx, t, client, ns)
	for _, name := range []string{"sched-a", "sched-b"} {
		if _, err := cluster.RegisterNode(ctx, client, cluster.NodeObject(name, "192.0.2.1", "10.250.0.0/24", 0)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}

	sched, err := cluster.StartScheduler(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unbound"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: "sched-b"},
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/e2e-test-images/agnhost:2.56",
				Args: []string{"pause"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var node string
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		return node != "", nil
	}); err != nil {
		p, _ := client.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		t.Fatalf("pod %s/%s not bound: %v (conditions %+v)", ns, pod.Name, err, p.Status.Conditions)
	}
	if node != "sched-b" {
		t.Fatalf("pod bound to %s, want sched-b (its node selector)", node)
	}
	t.Logf("pod bound to %s after %v", node, time.Since(start).Round(time.Millisecond))
}
