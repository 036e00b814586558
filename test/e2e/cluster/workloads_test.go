package cluster_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestWorkloads: a Deployment of 2 replicas becomes a ReplicaSet and 2
// Pods, and a ReplicationController of 2 its 2 Pods, made by Kubernetes'
// own controllers (the upstream tests' pause-pod Deployment and the jig's
// serve-hostname ReplicationControllers); a new namespace gets its
// kube-root-ca.crt ConfigMap; a selector Service its Endpoints; a deleted
// namespace goes, its pods first.
func TestWorkloads(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := cluster.StartWorkloads(ctx, srv.Config(), srv.CAData)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	client := kubernetes.NewForConfigOrDie(srv.Config())
	const ns = "workloads"
	createNamespace(ctx, t, client, ns)
	tmpl := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/e2e-test-images/agnhost:2.56", Args: []string{"pause"}}}}}
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "pause-pod"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pause"}}, Template: tmpl("pause")}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rcTmpl := tmpl("hostnames")
	if _, err := client.CoreV1().ReplicationControllers(ns).Create(ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "hostnames"},
		Spec: corev1.ReplicationControllerSpec{Replicas: ptr.To(int32(2)), Selector: map[string]string{"app": "hostnames"}, Template: &rcTmpl}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(srv.CAData), nil
	}); err != nil {
		t.Fatalf("no kube-root-ca.crt with the API server's CA in %s: %v", ns, err)
	}
	for _, app := range []string{"pause", "hostnames"} {
		start := time.Now()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			return err == nil && len(pods.Items) == 2, err
		}); err != nil {
			t.Fatalf("app=%s: 2 pods not made: %v", app, err)
		}
		t.Logf("app=%s: 2 pods made after %v", app, time.Since(start).Round(time.Millisecond))
	}
	// The endpoints controller writes a selector Service's Endpoints.
	if _, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pause"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "pause"}, Ports: []corev1.ServicePort{{Port: 80}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Endpoints(ns).Get(ctx, "pause", metav1.GetOptions{}) //nolint:staticcheck // the legacy API the spec reads
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no Endpoints for Service %s/pause: %v", ns, err)
	}
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		t.Fatalf("namespace %s not gone: %v (%d pods left)", ns, err, len(pods.Items))
	}
	t.Logf("namespace %s gone after %v", ns, time.Since(start).Round(time.Millisecond))
}
