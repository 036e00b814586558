//go:build kernel

package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// containerdConfig is the node's containerd (Debian's 1.6, CRI v1): the
// overlayfs snapshotter on a tmpfs (the guest's root is an overlay, which
// cannot be an overlay's upper layer), runc with cgroupfs (no systemd in
// the guest, so the kubelet's cgroupDriver is cgroupfs too), the test
// image's pause as the sandbox image, and Debian's CNI plugins.
const containerdConfig = `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + node.PauseImage + `"
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
`

// cniConfig is the pod network: one bridge on the node, the pod range from
// host-local, masquerade off the node (there is no other node).
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "bed",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + node.PodCIDR + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
`

// kubeletConfig departs from the defaults only where the VM needs it: no
// systemd (cgroupfs), no swap check, no webhook authentication (the API
// server cannot reach the guest), thresholds a 3 GiB tmpfs node never
// crosses, and no host resolv.conf.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
resolvConf: ""
localStorageCapacityIsolation: false
evictionHard: {memory.available: 10Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`

// requests is how many requests the client sends through the ClusterIP.
const requests = 200

// TestNodeGuest is the node: it mounts tmpfs for containerd's and the
// kubelet's state, starts containerd, imports the images from their OCI
// layout tars, starts the kubelet (which registers Node node-a), and then
// checks, with the timing of each step in its output:
//
//   - the DaemonSet controller's ipvs-proxy pod, bound by the scheduler,
//     runs its init containers to success and its proxy without a restart;
//   - the pod turns Ready only once the proxy has synced: the web Service
//     (created before the node existed) is already an IPVS virtual server
//     when the Ready condition is first seen;
//   - the web Service's ClusterIP answers every one of the client's
//     requests, from the CNI pod behind it, through IPVS.
func TestNodeGuest(t *testing.T) {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, node.EnvAdminKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	c := kubernetes.NewForConfigOrDie(cfg)
	work := t.TempDir()
	start := time.Now()
	last := start
	step := func(what string) {
		t.Logf("step %s: %v (at %v)", what, time.Since(last).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		last = time.Now()
	}

	for _, dir := range []string{"/var/lib/containerd", "/var/lib/kubelet", "/etc/cni/net.d"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"/var/lib/containerd", "/var/lib/kubelet"} {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatalf("mount tmpfs on %s: %v", dir, err)
		}
	}
	write := func(path, content string) string {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("/etc/cni/net.d/10-bed.conflist", cniConfig)
	ctrd := startDaemon(t, work, "containerd", "containerd", "--config", write(filepath.Join(work, "containerd.toml"), containerdConfig))
	waitFor(t, "containerd answers", 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		_, err := run("ctr", "version")
		return err == nil, err
	}, ctrd)
	step("containerd")

	for _, imp := range [][]string{
		{"--base-name", vmtest.GuestEnv(t, node.EnvReleaseRepo), vmtest.GuestEnv(t, node.EnvReleaseImage)},
		{vmtest.GuestEnv(t, node.EnvTestImage)},
	} {
		if out, err := run("ctr", append([]string{"-n", "k8s.io", "images", "import"}, imp...)...); err != nil {
			t.Fatalf("ctr images import %v: %v\n%s\n%s", imp, err, out, ctrd.tail(20))
		}
	}
	out, _ := run("ctr", "-n", "k8s.io", "images", "list", "-q")
	t.Logf("images in containerd's k8s.io namespace:\n%s", out)
	step("import images")

	kubelet := startDaemon(t, work, "kubelet", vmtest.GuestEnv(t, node.EnvKubelet),
		"--config="+write(filepath.Join(work, "kubelet.yaml"), kubeletConfig),
		"--kubeconfig="+vmtest.GuestEnv(t, node.EnvAdminKubeconfig),
		"--hostname-override="+node.NodeName, "--node-ip="+node.NodeIP,
		"--root-dir=/var/lib/kubelet", "--v=2")
	waitFor(t, "Node "+node.NodeName+" Ready", 5*time.Minute, time.Second, func() (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, node.NodeName, metav1.GetOptions{})
		return err == nil && condition(n.Status.Conditions, corev1.NodeReady), err
	}, ctrd, kubelet)
	step("kubelet registered, Node Ready")

	web, err := c.CoreV1().Services(node.WebNamespace).Get(ctx, node.WebService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := net.JoinHostPort(web.Spec.ClusterIP, strconv.Itoa(node.WebPort))
	ds, err := c.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "ipvs-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	var proxy corev1.Pod
	var virtualAtReady string
	waitFor(t, "the ipvs-proxy pod Ready", 10*time.Minute, 200*time.Millisecond, func() (bool, error) {
		pods, err := c.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		proxy = pods.Items[0]
		if !podReady(&proxy) {
			return false, fmt.Errorf("pod %s: %s", proxy.Name, podSummary(&proxy))
		}
		virtualAtReady, _ = run("ipvsadm", "-Ln", "-t", vip)
		return true, nil
	}, ctrd, kubelet)
	step("ipvs-proxy pod " + proxy.Name + " Ready")
	t.Logf("pod %s on %s: %s", proxy.Name, proxy.Spec.NodeName, podSummary(&proxy))
	if !strings.Contains(virtualAtReady, "TCP  "+vip) {
		t.Errorf("the pod was Ready before the proxy's first sync: no virtual server %s when Ready was first seen:\n%s", vip, virtualAtReady)
	}
	if proxy.Spec.NodeName != node.NodeName || proxy.Status.PodIP != node.NodeIP {
		t.Errorf("pod %s: node %q, IP %q; want %s, %s (hostNetwork)", proxy.Name, proxy.Spec.NodeName, proxy.Status.PodIP, node.NodeName, node.NodeIP)
	}
	for _, st := range proxy.Status.InitContainerStatuses {
		if term := st.State.Terminated; term == nil || term.ExitCode != 0 {
			t.Errorf("init container %s: %+v", st.Name, st.State)
		}
	}
	for _, st := range proxy.Status.ContainerStatuses {
		if st.RestartCount != 0 {
			t.Errorf("container %s restarted %d times", st.Name, st.RestartCount)
		}
	}

	var backend string
	waitFor(t, "the web pod behind "+vip+" in IPVS", 5*time.Minute, 500*time.Millisecond, func() (bool, error) {
		p, err := c.CoreV1().Pods(node.WebNamespace).Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil || !podReady(p) {
			return false, err
		}
		backend = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(node.WebTargetPort))
		out, err := run("ipvsadm", "-Ln", "-t", vip)
		return strings.Contains(out, "-> "+backend), err
	}, ctrd, kubelet)
	step("web pod " + backend + " behind " + vip)

	ok, failed := 0, 0
	client := &http.Client{Timeout: 3 * time.Second}
	var firstErr error
	for range requests {
		resp, err := client.Get("http://" + vip + "/")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %s", resp.Status)
			}
		}
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ok++
	}
	step(fmt.Sprintf("traffic: %d requests to ClusterIP %s, %d ok, %d failed", requests, vip, ok, failed))
	if failed != 0 {
		t.Errorf("%d of %d requests to %s failed, the first: %v", failed, requests, vip, firstErr)
	}
}

// run runs a command and returns its combined output.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func condition(conds []corev1.NodeCondition, typ corev1.NodeConditionType) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podSummary is the pod's phase and each container's state, for a failure.
func podSummary(p *corev1.Pod) string {
	parts := []string{string(p.Status.Phase)}
	for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		s := st.Name + "="
		switch {
		case st.State.Running != nil:
			s += "running"
		case st.State.Waiting != nil:
			s += "waiting:" + st.State.Waiting.Reason + " " + st.State.Waiting.Message
		case st.State.Terminated != nil:
			s += fmt.Sprintf("terminated:%d %s", st.State.Terminated.ExitCode, st.State.Terminated.Reason)
		}
		s += fmt.Sprintf(" ready=%v restarts=%d", st.Ready, st.RestartCount)
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
