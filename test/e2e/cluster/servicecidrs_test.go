package cluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestServiceCIDRs: a ServiceCIDR beside the API server's
// --service-cluster-ip-range turns Ready (the servicecidr controller's
// condition, which upstream's Service CIDRs test waits for), and a Service
// asking for a cluster IP in it gets that IP.
func TestServiceCIDRs(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctrl, err := cluster.StartServiceCIDRs(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	client := kubernetes.NewForConfigOrDie(srv.Config())
	cidr := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "test-svc-cidr"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"203.0.113.0/24"}}}
	if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, cidr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.NetworkingV1().ServiceCIDRs().Get(ctx, cidr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == networkingv1.ServiceCIDRConditionReady && c.Status == metav1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("ServiceCIDR %s not Ready: %v", cidr.Name, err)
	}
	t.Logf("ServiceCIDR Ready after %v", time.Since(start).Round(time.Millisecond))
	const ns = "servicecidrs"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "cidr1-test"},
		Spec: corev1.ServiceSpec{ClusterIP: "203.0.113.10", Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Service in the new ServiceCIDR: %v", err)
	}
	if svc.Spec.ClusterIP != "203.0.113.10" {
		t.Errorf("cluster IP %s, want 203.0.113.10", svc.Spec.ClusterIP)
	}
}
