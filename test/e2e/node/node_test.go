//go:build !kernel

package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// The host's inputs, set by make test-node (mk/node.mk).
const (
	envReleaseImage   = "NODE_RELEASE_IMAGE"     // the release image's OCI layout tar
	envRolloutImage   = "NODE_ROLLOUT_IMAGE"     // the same, built as a newer version
	envKubeProxy      = "NODE_KUBE_PROXY_BIN"    // make kube-proxy's binary
	envKubeProxyRoots = "NODE_KUBE_PROXY_ROOTFS" // its image's Debian root file system tar
	envRolloutTag     = "NODE_ROLLOUT_TAG"       // the rollout image's tag
	envHelm           = "NODE_HELM_BIN"          // make helm's binary
	envAgnhost        = "NODE_AGNHOST_BIN"       // make agnhost's binary
)

// TestNode boots the VM as one real node of the host's test API server,
// once per scenario (see TestInstallGuest and TestMigrateGuest for what
// the guest checks). The host half is the control plane: the API server
// with kube-controller-manager's DaemonSet, garbage collector, EndpointSlice
// and ServiceAccount controllers and kube-scheduler in process; kubeadm
// v1.34's kube-proxy objects with the guest's view of the API server as
// the control-plane endpoint; the backend Service and pod.
//
// make test-node sets the kubelet, images and kube-proxy; without them the
// test skips, so make test-e2e only compiles it.
func TestNode(t *testing.T) {
	kubelet, release := os.Getenv(node.EnvKubelet), os.Getenv(envReleaseImage)
	if kubelet == "" || release == "" {
		t.Skip("NODE_KUBELET_BIN and NODE_RELEASE_IMAGE are not set: make test-node builds both and runs this test")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "testpod")
	if err := gobuild.Run(".", "build", "-trimpath", "-o", bin, "./testpod"); err != nil {
		t.Fatal(err)
	}
	testImage := filepath.Join(dir, "testpod.tar")
	if err := node.WriteTestImage(testImage, bin); err != nil {
		t.Fatal(err)
	}
	imports := []string{testImage, writeAgnhostImage(t, dir)}

	// install: the overlay applied on a cluster without kube-proxy, as
	// docs/migration.md's replace step starts.
	t.Run("install", func(t *testing.T) {
		flag, kubeletFwd := kubeletAPI(t)
		srv, admin := controlPlane(t, flag)
		ctx := context.Background()
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
		ref, repo := releaseImage(t, objs)
		t.Logf("step apply: replace-kube-proxy overlay, DaemonSet kube-system/ipvs-proxy with image %s", ref)
		createWeb(ctx, t, admin, corev1.ServiceTypeClusterIP)
		bootNodeForwards(t, srv, []vmtest.HostForward{kubeletFwd}, "TestInstallGuest", kubelet, append(imports, repo+"="+release))
	})

	// migrate and swap: kubeadm's kube-proxy serves, then the replace step
	// and a rollout (the guest applies the overlay), or the image swap in
	// kube-proxy's own DaemonSet, under traffic. make test-node-install
	// runs install alone, without these scenarios' inputs.
	if os.Getenv(envKubeProxy) == "" && os.Getenv(envRolloutImage) == "" {
		t.Logf("%s and %s are not set: install alone (make test-node-install)", envKubeProxy, envRolloutImage)
		return
	}
	kubeProxy, rootfs, rollout, tag := os.Getenv(envKubeProxy), os.Getenv(envKubeProxyRoots), os.Getenv(envRolloutImage), os.Getenv(envRolloutTag)
	if kubeProxy == "" || rootfs == "" || rollout == "" || tag == "" {
		t.Fatalf("%s, %s, %s and %s must be set (make test-node)", envKubeProxy, envKubeProxyRoots, envRolloutImage, envRolloutTag)
	}
	kpImage := filepath.Join(dir, "kube-proxy.tar")
	if err := node.WriteKubeProxyImage(kpImage, rootfs, kubeProxy); err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Build(deploy.ReplaceKubeProxy)
	if err != nil {
		t.Fatal(err)
	}
	ref, repo := releaseImage(t, objs)
	chart, err := filepath.Abs(filepath.Join("..", "..", "..", "charts", "ipvs-proxy"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []struct {
		name, guest string
		env         []string
	}{
		{"migrate", "TestMigrateGuest", []string{node.EnvRollout + "=" + repo + ":" + tag}},
		{"swap", "TestSwapGuest", []string{node.EnvSwap + "=" + ref}},
		// migrate with docs/install.md's helm install and upgrade.
		{"helm", "TestHelmGuest", []string{node.EnvRollout + "=" + repo + ":" + tag, node.EnvHelm + "=" + os.Getenv(envHelm), node.EnvChart + "=" + chart}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			if sc.name == "helm" && os.Getenv(envHelm) == "" {
				t.Fatalf("%s must be set (make test-node)", envHelm)
			}
			srv, admin := controlPlane(t)
			createWeb(context.Background(), t, admin, corev1.ServiceTypeNodePort)
			bootNode(t, srv, sc.guest, kubelet, append(imports, kpImage, repo+"="+release, repo+"="+rollout), sc.env...)
		})
	}
}

// writeAgnhostImage writes the web pod's image, from make agnhost's
// binary, into dir and returns its path.
func writeAgnhostImage(t *testing.T, dir string) string {
	t.Helper()
	bin := os.Getenv(envAgnhost)
	if bin == "" {
		t.Fatalf("%s must be set (make test-node, make test-migration-doc)", envAgnhost)
	}
	out := filepath.Join(dir, "agnhost.tar")
	if err := node.WriteAgnhostImage(out, bin); err != nil {
		t.Fatal(err)
	}
	return out
}

// releaseImage is the image of the ipvs-proxy DaemonSet among objs, and
// its repository.
func releaseImage(t *testing.T, objs []*unstructured.Unstructured) (ref, repo string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" || o.GetName() != "ipvs-proxy" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
			t.Fatal(err)
		}
		ref = ds.Spec.Template.Spec.Containers[0].Image
		return ref, ref[:strings.LastIndex(ref, ":")]
	}
	t.Fatal("no DaemonSet ipvs-proxy in the overlay")
	return "", ""
}

// controlPlane starts the API server (with flags added) and the
// controllers for one scenario and creates kubeadm's kube-proxy objects,
// the control-plane endpoint being the API server as the guest reaches it.
func controlPlane(t *testing.T, flags ...string) (*apiserver.Server, kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	start := time.Now()
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: append([]string{"--allow-privileged=true"}, flags...)})
	ctrl, err := cluster.StartControllers(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	sched, err := cluster.StartScheduler(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sched.Stop)
	dsc, err := cluster.StartDaemonSets(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dsc.Stop)
	// A deleted DaemonSet's pods go as in a cluster (background deletion).
	gc, err := cluster.StartGarbageCollector(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Stop)
	if err := deploy.InstallKubeadm(ctx, srv, srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	t.Logf("step control plane: API server, controllers, scheduler, kubeadm's objects in %v", time.Since(start).Round(time.Millisecond))
	return srv, kubernetes.NewForConfigOrDie(srv.Config())
}

// bootNode runs the guest test name in the VM with the kubelet and the
// images to import.
func bootNode(t *testing.T, srv *apiserver.Server, name, kubelet string, imports []string, env ...string) {
	t.Helper()
	bootNodeForwards(t, srv, nil, name, kubelet, imports, env...)
}

// nodeCPUs is the node VM's vCPU count. With two, the guest's kernel
// locked up as the kubelet started, in about one run of ten: the kubelet
// spinning on one vCPU while the other, idle, never woke for its timers
// (soft lockups of both, RCU stalls); a wake-up the emulator lost. One
// vCPU needs no wake-up from another.
const nodeCPUs = 1

// bootNodeForwards is bootNode with host ports forwarded into the guest.
func bootNodeForwards(t *testing.T, srv *apiserver.Server, forwards []vmtest.HostForward, name, kubelet string, imports []string, env ...string) {
	t.Helper()
	start := time.Now()
	dir := t.TempDir()
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := srv.WriteKubeconfig(kc, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	env = append(env, node.EnvAdminKubeconfig+"="+kc, node.EnvKubelet+"="+kubelet, node.EnvImports+"="+strings.Join(imports, ","))
	guest.Run(context.Background(), t, dir, guest.Suite{Test: name, BuildFlags: []string{"-vet=off"}, Timeout: 20 * time.Minute,
		CPUs: nodeCPUs, Port: srv.Port, HostForwards: forwards, Env: env})
	t.Logf("step total: %v", time.Since(start).Round(time.Second))
}

// createWeb creates the backend: a CNI pod of agnhost's netexec,
// bound to the node (no ServiceAccount token: its namespace has no
// kube-root-ca.crt), and its Service of type typ.
func createWeb(ctx context.Context, t *testing.T, c kubernetes.Interface, typ corev1.ServiceType) {
	t.Helper()
	labels := map[string]string{"app": node.WebService}
	port := corev1.ServicePort{Port: node.WebPort, TargetPort: intstr.FromInt32(node.WebTargetPort), Protocol: corev1.ProtocolTCP}
	if typ == corev1.ServiceTypeNodePort {
		port.NodePort = node.WebNodePort
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(node.WebTargetPort)}},
		PeriodSeconds: 2}
	objs := []func() error{
		func() error {
			_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: node.WebNamespace}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Services(node.WebNamespace).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: node.WebService},
				Spec:       corev1.ServiceSpec{Type: typ, Selector: labels, Ports: []corev1.ServicePort{port}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Pods(node.WebNamespace).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: labels},
				Spec: corev1.PodSpec{NodeName: node.NodeName, AutomountServiceAccountToken: ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(2)),
					Containers: []corev1.Container{{Name: "web", Image: node.AgnhostImage, ImagePullPolicy: corev1.PullNever,
						Args:           []string{"netexec", "--http-port=" + strconv.Itoa(node.WebTargetPort)},
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
