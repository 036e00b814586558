//go:build !kernel

package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/guest"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
)

// TestNode boots the VM as one real node of the host's test API server
// (see TestNodeGuest for what the guest checks). The host half is the
// control plane and the operator: kube-controller-manager's controllers
// and kube-scheduler in process, kubeadm v1.34's kube-proxy objects with
// the guest's view of the API server as the control-plane endpoint, the
// replace-kube-proxy overlay applied with server-side apply as `kubectl
// apply -k` does, kubeadm's kube-proxy DaemonSet deleted as
// docs/migration.md's last step does, and the backend Service and pod.
//
// NODE_KUBELET_BIN (scripts/build-k8s.sh kubelet) and NODE_RELEASE_IMAGE
// (the release image's OCI layout tar) are set by make test-node; without
// them the test skips, so make test-e2e only compiles it.
func TestNode(t *testing.T) {
	kubelet, image := os.Getenv(node.EnvKubelet), os.Getenv(node.EnvReleaseImage)
	if kubelet == "" || image == "" {
		t.Skip("NODE_KUBELET_BIN and NODE_RELEASE_IMAGE are not set: make test-node builds both and runs this test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{"--allow-privileged=true"}})
	ctrl, err := cluster.StartControllers(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	sched, err := cluster.StartScheduler(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()
	dsc, err := cluster.StartDaemonSets(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer dsc.Stop()
	t.Logf("step control plane: API server, controllers, scheduler in %v", time.Since(start).Round(time.Millisecond))

	// The operator's part: kubeadm's cluster, then the overlay.
	if err := deploy.InstallKubeadm(ctx, srv, srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	if err := admin.AppsV1().DaemonSets(metav1.NamespaceSystem).Delete(ctx, "kube-proxy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Build(deploy.ReplaceKubeProxy)
	if err != nil {
		t.Fatal(err)
	}
	a, err := deploy.NewApplier(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctx, objs, false); err != nil {
		t.Fatal(err)
	}
	ds, err := admin.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "ipvs-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := ds.Spec.Template.Spec.Containers[0].Image
	repo := ref[:strings.LastIndex(ref, ":")]
	t.Logf("step apply: replace-kube-proxy overlay, DaemonSet kube-system/ipvs-proxy with image %s", ref)
	createWeb(ctx, t, admin)

	dir := t.TempDir()
	bin := filepath.Join(dir, "testpod")
	if err := gobuild.Run(".", "build", "-trimpath", "-o", bin, "./testpod"); err != nil {
		t.Fatal(err)
	}
	testImage := filepath.Join(dir, "testpod.tar")
	if err := node.WriteTestImage(testImage, bin); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := srv.WriteKubeconfig(kc, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestNodeGuest", BuildFlags: []string{"-vet=off"}, Timeout: 20 * time.Minute,
		Port: srv.Port, Env: []string{
			node.EnvAdminKubeconfig + "=" + kc, node.EnvKubelet + "=" + kubelet,
			node.EnvReleaseImage + "=" + image, node.EnvReleaseRepo + "=" + repo,
			node.EnvTestImage + "=" + testImage, node.EnvWork + "=" + dir,
		}})
	t.Logf("step total: %v", time.Since(start).Round(time.Second))
}

// createWeb creates the backend: a CNI pod of the test image serving HTTP,
// bound to the node (no ServiceAccount token: its namespace has no
// kube-root-ca.crt), and its ClusterIP Service.
func createWeb(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	labels := map[string]string{"app": node.WebService}
	objs := []func() error{
		func() error {
			_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: node.WebNamespace}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Services(node.WebNamespace).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: node.WebService},
				Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
					Port: node.WebPort, TargetPort: intstr.FromInt32(node.WebTargetPort), Protocol: corev1.ProtocolTCP}}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(node.WebTargetPort)}},
				PeriodSeconds: 2}
			_, err := c.CoreV1().Pods(node.WebNamespace).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: labels},
				Spec: corev1.PodSpec{NodeName: node.NodeName, AutomountServiceAccountToken: ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(2)),
					Containers: []corev1.Container{{Name: "web", Image: node.ServeImage, ImagePullPolicy: corev1.PullNever,
						Args:           []string{"-serve", ":8080"},
						Ports:          []corev1.ContainerPort{{ContainerPort: node.WebTargetPort}},
						ReadinessProbe: probe}}},
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
}
