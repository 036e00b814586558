package cluster_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestGarbageCollector: with kube-controller-manager's garbage collector
// in-process, deleting a Service deletes the EndpointSlice the
// endpointslice controller made for it (owned by the Service), and
// deleting a ReplicaSet deletes the Pods the replicaset controller made
// (owned by the ReplicaSet). Neither controller deletes them itself:
// without the garbage collector both stay.
func TestGarbageCollector(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	gc, err := cluster.StartGarbageCollector(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Stop()
	t.Logf("garbage collector synced in %v", time.Since(start).Round(time.Millisecond))
	ctrl, err := cluster.StartControllers(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	work, err := cluster.StartWorkloads(ctx, srv.Config(), srv.CAData)
	if err != nil {
		t.Fatal(err)
	}
	defer work.Stop()

	client := kubernetes.NewForConfigOrDie(srv.Config())
	const ns = "gc"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "gc"}
	if _, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gc"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "gc"},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/e2e-test-images/agnhost:2.56", Args: []string{"pause"}}}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slices := func(ctx context.Context) ([]discoveryv1.EndpointSlice, error) {
		l, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=gc"})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	pods := func(ctx context.Context) ([]corev1.Pod, error) {
		l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gc"})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := slices(ctx)
		if err != nil {
			return false, err
		}
		p, err := pods(ctx)
		return len(s) > 0 && len(p) == 2, err
	}); err != nil {
		t.Fatalf("the controllers made no EndpointSlice for Service %s/gc or not 2 Pods for ReplicaSet %s/gc: %v", ns, ns, err)
	}

	if err := client.CoreV1().Services(ns).Delete(ctx, "gc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.AppsV1().ReplicaSets(ns).Delete(ctx, "gc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := slices(ctx)
		if err != nil {
			return false, err
		}
		p, err := pods(ctx)
		return len(s) == 0 && len(p) == 0, err
	}); err != nil {
		leftSlices, _ := slices(ctx)
		leftPods, _ := pods(ctx)
		for _, s := range leftSlices {
			t.Errorf("EndpointSlice %s/%s of the deleted Service is left (owners %v)", ns, s.Name, s.OwnerReferences)
		}
		for _, p := range leftPods {
			t.Errorf("Pod %s/%s of the deleted ReplicaSet is left (owners %v)", ns, p.Name, p.OwnerReferences)
		}
		t.Fatalf("not collected: %v", err)
	}
	t.Logf("the Service's EndpointSlices and the ReplicaSet's Pods collected %v after their deletion", time.Since(start).Round(time.Millisecond))
}
