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
	"k8s.io/client-go/rest"
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
// systemd (cgroupfs), no swap check, no webhook authentication (anonymous
// requests allowed: the API server, which reaches the kubelet API through
// the install scenario's tunnel, has no client certificate for it),
// thresholds a 3 GiB tmpfs node never crosses, and no host resolv.conf.
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

// bed is the node the guest test started: the clients of the test API
// server, containerd and the kubelet.
type bed struct {
	t       *testing.T
	cfg     *rest.Config
	c       kubernetes.Interface
	ctrd    *daemon
	kubelet *daemon
	start   time.Time
	last    time.Time
}

// step logs that what is done, its time and the time since the start.
func (b *bed) step(what string) {
	b.t.Logf("step %s: %v (at %v)", what, time.Since(b.last).Round(time.Millisecond), time.Since(b.start).Round(time.Millisecond))
	b.last = time.Now()
}

// wait is waitFor with the node's daemons.
func (b *bed) wait(what string, timeout, interval time.Duration, cond func() (bool, error)) {
	b.t.Helper()
	waitFor(b.t, what, timeout, interval, cond, b.ctrd, b.kubelet)
}

// startNode mounts tmpfs for containerd's and the kubelet's state, starts
// containerd, imports the images from their OCI layout tars, and starts the
// kubelet, which registers Node node-a; it runs started (when not nil) as
// soon as the kubelet has made the pods' cgroup, and returns once the Node
// is Ready.
func startNode(t *testing.T, started func(*bed)) *bed {
	cfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, node.EnvAdminKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{t: t, cfg: cfg, c: kubernetes.NewForConfigOrDie(cfg), start: time.Now()}
	b.last = b.start
	work := t.TempDir()
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
	b.ctrd = startDaemon(t, work, "containerd", "containerd", "--config", write(filepath.Join(work, "containerd.toml"), containerdConfig))
	waitFor(t, "containerd answers", 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		_, err := run("ctr", "version")
		return err == nil, err
	}, b.ctrd)
	b.step("containerd")

	for _, imp := range strings.Split(vmtest.GuestEnv(t, node.EnvImports), ",") {
		args := []string{"-n", "k8s.io", "images", "import"}
		if base, tar, ok := strings.Cut(imp, "="); ok {
			args = append(args, "--base-name", base, tar)
		} else {
			args = append(args, imp)
		}
		if out, err := run("ctr", args...); err != nil {
			t.Fatalf("ctr %v: %v\n%s\n%s", args, err, out, b.ctrd.tail(20))
		}
	}
	out, _ := run("ctr", "-n", "k8s.io", "images", "list", "-q")
	t.Logf("images in containerd's k8s.io namespace:\n%s", out)
	b.step("import images")

	b.kubelet = startDaemon(t, work, "kubelet", vmtest.GuestEnv(t, node.EnvKubelet),
		"--config="+write(filepath.Join(work, "kubelet.yaml"), kubeletConfig),
		"--kubeconfig="+vmtest.GuestEnv(t, node.EnvAdminKubeconfig),
		"--hostname-override="+node.NodeName, "--node-ip="+node.NodeIP,
		"--root-dir=/var/lib/kubelet", "--v=2")
	if started != nil {
		b.wait("the kubelet's cgroup "+podsCgroup, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
			_, err := os.Stat(podsCgroup)
			return err == nil, err
		})
		started(b)
	}
	b.wait("Node "+node.NodeName+" Ready", 5*time.Minute, time.Second, func() (bool, error) {
		n, err := b.c.CoreV1().Nodes().Get(context.Background(), node.NodeName, metav1.GetOptions{})
		return err == nil && condition(n.Status.Conditions, corev1.NodeReady), err
	})
	b.step("kubelet registered, Node Ready")
	return b
}

// TestInstallGuest is the install scenario's node (TestNode's host half
// applied the overlay before the node existed). It checks, with the
// timing of each step in its output:
//
//   - the DaemonSet controller's ipvs-proxy pod, bound by the scheduler,
//     runs its init containers to success and its proxy without a restart;
//   - the pod turns Ready only once the proxy has synced: the web Service
//     (created before the node existed) is already an IPVS virtual server
//     when the Ready condition is first seen;
//   - the web Service's ClusterIP answers every request a client on the
//     node sends for 5 s, from the CNI pod behind it, through IPVS.
func TestInstallGuest(t *testing.T) {
	ctx := context.Background()
	b := startNode(t, blockAPI)
	c, step := b.c, b.step
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
	// Until the API server is reachable the proxy cannot sync, so its pod
	// must not turn Ready (the probe is /healthz, 503 until the first full
	// sync; /livez is 200 from the start).
	client := &http.Client{Timeout: 3 * time.Second}
	b.wait("the proxy running with /livez 200, the API server out of its reach", 10*time.Minute, 500*time.Millisecond, func() (bool, error) {
		p, err := onePod(ctx, b, sel)
		if err != nil {
			return false, err
		}
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return false, fmt.Errorf("pod %s: %s", p.Name, podSummary(p))
		}
		err = get(client, "http://127.0.0.1:10256/livez")
		return err == nil, err
	})
	step("proxy running, API server out of its reach")
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if p, err := onePod(ctx, b, sel); err == nil && podReady(p) {
			t.Errorf("pod %s turned Ready while its proxy could not reach the API server: Ready before the first full sync", p.Name)
			break
		}
	}
	if err := get(client, "http://127.0.0.1:10256/healthz"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("/healthz before the first sync: %v, want status 503", err)
	}
	if out, err := run("nft", "delete", "table", "inet", blockTable); err != nil {
		t.Fatalf("nft delete table: %v\n%s", err, out)
	}
	step(fmt.Sprintf("not Ready for %v; API server reachable again", hold))

	var proxy corev1.Pod
	var virtualAtReady string
	b.wait("the ipvs-proxy pod Ready", 10*time.Minute, 200*time.Millisecond, func() (bool, error) {
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
	})
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
	b.wait("the web pod behind "+vip+" in IPVS", 5*time.Minute, 500*time.Millisecond, func() (bool, error) {
		p, err := c.CoreV1().Pods(node.WebNamespace).Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil || !podReady(p) {
			return false, err
		}
		backend = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(node.WebTargetPort))
		out, err := run("ipvsadm", "-Ln", "-t", vip)
		return strings.Contains(out, "-> "+backend), err
	})
	step("web pod " + backend + " behind " + vip)

	tr := startTraffic("install", 0, vip)
	time.Sleep(5 * time.Second)
	tr.finish(t)
	step("traffic")

	// Metrics where docs/operations.md says, logs where the kubelet keeps
	// them and through the API server (`kubectl logs`).
	resp, err := client.Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(metrics), "kubeproxy_sync_proxy_rules_last_timestamp_seconds") {
		t.Errorf("127.0.0.1:10249/metrics (%v): no kubeproxy_sync_proxy_rules_last_timestamp_seconds", err)
	}
	logs, err := filepath.Glob(fmt.Sprintf("/var/log/pods/%s_%s_%s/ipvs-proxy/*.log", proxy.Namespace, proxy.Name, proxy.UID))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no log file of the proxy container under /var/log/pods (%v)", err)
	}
	if log, err := os.ReadFile(logs[0]); err != nil || len(log) == 0 {
		t.Errorf("%s: %v, %d bytes", logs[0], err, len(log))
	} else {
		first := strings.SplitN(string(log), "\n", 2)[0]
		t.Logf("%s: %d bytes, the first line: %s", logs[0], len(log), first)
		logsThroughAPI(ctx, b, &proxy, "ipvs-proxy", first)
	}
}

// podsCgroup is the kubelet's cgroup of every pod (cgroupfs driver).
const podsCgroup = "/sys/fs/cgroup/kubepods"

// blockTable is the nftables table blockAPI adds; hold is how long the
// install scenario keeps it: more than two of the DaemonSet's readiness
// probe periods (10 s).
const (
	blockTable = "node-bed"
	hold       = 25 * time.Second
)

// blockAPI makes every connection to the API server from a pod's cgroup
// fail (a TCP reset), so the proxy pod starts but cannot sync; the kubelet,
// outside that cgroup, still reaches it.
func blockAPI(b *bed) {
	b.t.Helper()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(b.cfg.Host, "https://"))
	if err != nil {
		b.t.Fatal(err)
	}
	rules := fmt.Sprintf(`table inet %s {
	chain out {
		type filter hook output priority 0; policy accept;
		socket cgroupv2 level 1 "kubepods" ip daddr %s tcp dport %s reject with tcp reset
	}
}
`, blockTable, host, port)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.t.Fatalf("nft -f: %v\n%s\n%s", err, out, rules)
	}
	b.step("pods' connections to the API server refused (nft)")
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
