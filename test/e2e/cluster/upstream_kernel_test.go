//go:build kernel

package cluster_test

import (
	"bufio"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilexec "k8s.io/utils/exec"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// upstreamTests are what the real e2e.test needs of the bed (issue 17,
// item 3), checked on their own: kube-scheduler binds a Pod that names no
// node, and exec through the API server reaches the pod's namespace.
func (b *bed) upstreamTests(t *testing.T) {
	t.Run("bed: a scheduled pod is exec'd into through the API server", b.execThroughAPIServer)
	if b.dns {
		b.clusterDNSTests(t)
	}
	if b.upstreamDir != "" {
		t.Run("bed: a pod reaches the API server through the kubernetes Service", b.apiServerFromPod)
		t.Run("upstream e2e.test", b.runUpstreamE2E)
	}
}

// apiServerFromPod: the kubernetes Service's endpoint is the address the
// API server advertises (the lease reconciler's, cluster.APIServerIP), and
// a pod on node-c gets an HTTP answer to /healthz from the API server
// through the Service's ClusterIP (TLS, the server's certificate not
// checked: the bed's names neither the ClusterIP nor that address; 200,
// or 401/403 if anonymous requests are refused).
func (b *bed) apiServerFromPod(t *testing.T) {
	ns := b.testNamespace(t, "apiserver-from-pod")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eventually(t, "the kubernetes EndpointSlice lists the advertised address", time.Minute, func() error {
		slices, err := b.client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			return err
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 && e.Addresses[0] == cluster.APIServerIP.String() {
					return nil
				}
			}
		}
		return fmt.Errorf("no endpoint %s in %d slices", cluster.APIServerIP, len(slices.Items))
	})
	svc, err := b.client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.runPod(t, ns, podSpec{name: "client", node: "node-c"})
	url := fmt.Sprintf("https://%s:443/healthz", svc.Spec.ClusterIP)
	eventually(t, "curl -k "+url+" from a pod on node-c", time.Minute, func() error {
		out, stderr, err := podExec(ctx, b.cfg, b.client, "websocket", ns, "client", "",
			"curl", "-sSk", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", url)
		if err != nil || (out != "200" && out != "401" && out != "403") {
			return fmt.Errorf("HTTP status %q, stderr %q: %v", out, stderr, err)
		}
		t.Logf("curl -k %s from a pod on node-c: HTTP %s", url, out)
		return nil
	})
}

// execThroughAPIServer: a Pod with no nodeName (a node selector for
// node-b) is bound by the scheduler on the host and run by node-b's
// agent; `kubectl exec -i` into it, through the API server, its egress
// tunnel and the host forward to node-b's kubelet API, runs `ip addr` in
// the pod's network namespace (its eth0 has the pod's IP), passes stdin
// and brings back stdout and the exit code.
func (b *bed) execThroughAPIServer(t *testing.T) {
	ns := b.testNamespace(t, "upstream-exec")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "execpod"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelHostname: "node-b"},
		Containers:   []corev1.Container{{Name: "agnhost", Image: agnhost, Args: []string{"pause"}}}}}
	if _, err := b.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, podStartTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = b.client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Status.PodIP != "" && got.Status.Phase == corev1.PodRunning, err
	}); err != nil {
		t.Fatalf("pod %s/%s not scheduled and running: %v (node %q)", ns, p.Name, err, got.Spec.NodeName)
	}
	if got.Spec.NodeName != "node-b" {
		t.Fatalf("pod bound to %q, want node-b (its node selector)", got.Spec.NodeName)
	}
	t.Logf("pod bound to %s and running at %s after %v", got.Spec.NodeName, got.Status.PodIP, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	stdout, stderr, err := podExec(ctx, b.cfg, b.client, "websocket", ns, p.Name, "from stdin\n",
		"sh", "-c", "ip -4 -o addr show dev eth0; cat; exit 7")
	t.Logf("exec in %v: stdout %q stderr %q err %v", time.Since(start).Round(time.Millisecond), stdout, stderr, err)
	if !strings.Contains(stdout, " "+got.Status.PodIP+"/32 ") {
		t.Errorf("exec's `ip addr show dev eth0` does not show the pod's %s/32: not run in the pod's namespace", got.Status.PodIP)
	}
	if !strings.Contains(stdout, "from stdin\n") {
		t.Errorf("exec's stdin did not come back through `cat`")
	}
	var exitErr utilexec.ExitError
	if !asExit(err, &exitErr) || exitErr.ExitStatus() != 7 {
		t.Errorf("exec: %v, want exit code 7", err)
	}
}

// runUpstreamE2E runs upstream's e2e.test, unmodified, in the runner
// namespace (the upstream tests' "external client": its NodePort and
// LoadBalancer requests come from there) against the bed, focused by
// CLUSTER_UPSTREAM_FOCUS, and reports each spec's result from its JUnit
// report as a line "upstream: RESULT NAME". CLUSTER_UPSTREAM_FOCUS_2, when
// set, is a second focus run at the same time in a second e2e.test (its
// output lines prefixed "[2] "): specs that mostly wait, as SN-42 and
// SN-43's rolling updates, share the VM's time. The bed's cloud
// (startCloudLB) serves their LoadBalancer Services.
func (b *bed) runUpstreamE2E(t *testing.T) {
	focus := os.Getenv("CLUSTER_UPSTREAM_FOCUS")
	if focus == "" {
		t.Fatal("CLUSTER_UPSTREAM_FOCUS is empty: say which upstream specs to run")
	}
	foci := []string{focus}
	if f := os.Getenv("CLUSTER_UPSTREAM_FOCUS_2"); f != "" {
		foci = append(foci, f)
	}
	// e2e.test and the kubectl it runs dial 127.0.0.1:PORT in the runner.
	stop := b.runner.Relay(t, "127.0.0.1:"+b.apiPort, b.apiHostPort)
	defer stop()
	stopLB := b.startCloudLB(t)
	defer stopLB()
	runs := make([]upstreamRun, len(foci))
	var wg sync.WaitGroup
	for i, f := range foci {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = b.runE2ETest(t, i+1, f)
		}()
	}
	wg.Wait()
	failed, total := 0, 0
	for i, r := range runs {
		if r.err != nil {
			t.Errorf("upstream: e2e.test %d: %v", i+1, r.err)
		}
		for _, s := range r.specs {
			t.Logf("upstream: %s %s (%.1f s)", s.result, s.name, s.seconds)
			total++
			if s.result == "failed" {
				failed++
			}
		}
	}
	if failed > 0 {
		t.Errorf("upstream: %d of %d specs failed", failed, total)
	}
}

// upstreamRun is one e2e.test's outcome: its specs' results, and its
// error (its exit, or its JUnit report missing).
type upstreamRun struct {
	specs []specResult
	err   error
}

// runE2ETest runs e2e.test number n with focus in the runner and reads
// its JUnit report. Its output goes to the test's, each line prefixed
// "[n] " when n > 1.
func (b *bed) runE2ETest(t *testing.T, n int, focus string) upstreamRun {
	report := t.TempDir()
	args := []string{
		"--kubeconfig=" + b.proxyKC,
		"--provider=skeleton",
		"--kubectl-path=" + filepath.Join(b.upstreamDir, "kubectl"),
		"--report-dir=" + report,
		"--allowed-not-ready-nodes=0",
		"--dump-logs-on-failure=false",
		"--ginkgo.focus=" + focus,
		"--ginkgo.no-color", "--ginkgo.v",
		"--ginkgo.timeout=" + upstreamTimeout.String(),
	}
	if skip := os.Getenv("CLUSTER_UPSTREAM_SKIP"); skip != "" {
		args = append(args, "--ginkgo.skip="+skip)
	}
	cmd := exec.Command(filepath.Join(b.upstreamDir, "e2e.test"), args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	var prefixed sync.WaitGroup
	if n > 1 {
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		prefixed.Add(1)
		go func() {
			defer prefixed.Done()
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				fmt.Printf("[%d] %s\n", n, sc.Text())
			}
			_, _ = io.Copy(io.Discard, pr)
		}()
		defer func() { _ = pw.Close(); prefixed.Wait() }()
	}
	cmd.Env = append(os.Environ(), "HOME="+report)
	start := time.Now()
	t.Logf("upstream: e2e.test %d: %s", n, strings.Join(args, " "))
	if err := b.runner.Do(cmd.Start); err != nil {
		return upstreamRun{err: err}
	}
	runErr := cmd.Wait()
	t.Logf("upstream: e2e.test %d ended after %v: %v", n, time.Since(start).Round(time.Second), runErr)
	specs, err := junitResults(filepath.Join(report, "junit_01.xml"))
	if err == nil {
		err = runErr
	}
	return upstreamRun{specs: specs, err: err}
}

// upstreamTimeout bounds the upstream run (ginkgo's --ginkgo.timeout).
const upstreamTimeout = 25 * time.Minute

// specResult is one spec of a JUnit report.
type specResult struct {
	name, result string
	seconds      float64
}

// junitResults reads ginkgo's JUnit report: every spec that ran, passed
// or failed (skipped specs are left out: the focus chose them out).
func junitResults(path string) ([]specResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("JUnit report: %w", err)
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Status  string    `xml:"status,attr"`
				Time    float64   `xml:"time,attr"`
				Skipped *struct{} `xml:"skipped"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("JUnit report %s: %w", path, err)
	}
	var out []specResult
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			switch {
			case c.Skipped != nil:
				continue
			case c.Failure != nil || c.Error != nil:
				out = append(out, specResult{c.Name, "failed", c.Time})
			default:
				out = append(out, specResult{c.Name, "passed", c.Time})
			}
		}
	}
	return out, nil
}
