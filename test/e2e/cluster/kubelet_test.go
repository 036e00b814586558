package cluster_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/cluster"
)

// hostExec runs the commands of one pod as host processes: the API
// server's side of exec is what TestKubeletExec checks; the guest's agent
// runs them in the pod's network namespace instead.
type hostExec struct{ namespace, pod string }

func (h hostExec) Exec(ctx context.Context, namespace, pod, _ string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if namespace != h.namespace || pod != h.pod {
		return cluster.ErrNoPod
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, stderr
	return cluster.ExitStatus(c.Run())
}

// TestKubeletExec: `kubectl exec` through the API server reaches a node's
// kubelet API (ServeKubelet) by the API server's own path: the pod's
// node, its Hostname address and kubelet port, the egress selector's
// CONNECT through the KubeletTunnel; stdin, stdout, stderr and the exit
// code come back, over websockets (the e2e framework's and kubectl's
// first choice, translated by the API server) and over SPDY.
func TestKubeletExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A short path: a Unix socket's name has at most 107 bytes.
	sockDir, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "tunnel.sock")
	egress := filepath.Join(sockDir, "egress.yaml")
	if err := os.WriteFile(egress, cluster.EgressSelectorConfig(sock), 0o600); err != nil {
		t.Fatal(err)
	}

	const ns, pod, node = "exec", "execpod", "exec-node"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := cluster.ServeKubelet(l, node, hostExec{ns, pod}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	target := net.JoinHostPort(node, strconv.Itoa(cluster.KubeletPort))
	tunnel, err := cluster.StartKubeletTunnel(sock, map[string]string{target: l.Addr().String()}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer tunnel.Close()

	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{"--egress-selector-config-file=" + egress}})
	client := kubernetes.NewForConfigOrDie(srv.Config())
	if _, err := cluster.RegisterNode(ctx, client, cluster.NodeObject(node, "192.0.2.10", "10.251.0.0/24", cluster.KubeletPort)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{pod, "elsewhere"} {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agnhost",
				Image: "registry.k8s.io/e2e-test-images/agnhost:2.56", Args: []string{"pause"}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	for _, via := range []string{"websocket", "spdy"} {
		t.Run(via, func(t *testing.T) {
			stdout, stderr, err := podExec(ctx, srv.Config(), client, via, ns, pod, "in\n",
				"sh", "-c", `read line; echo "got $line"; echo oops >&2; exit 3`)
			if stdout != "got in\n" || stderr != "oops\n" {
				t.Errorf("stdout %q stderr %q, want %q and %q", stdout, stderr, "got in\n", "oops\n")
			}
			var exitErr utilexec.ExitError
			if ok := asExit(err, &exitErr); !ok || exitErr.ExitStatus() != 3 {
				t.Fatalf("exit: %v, want exit code 3", err)
			}
			t.Logf("exec via %s: stdout %q stderr %q, %v", via, stdout, stderr, err)
		})
	}
	t.Run("a pod the node does not run", func(t *testing.T) {
		_, _, err := podExec(ctx, srv.Config(), client, "websocket", ns, "elsewhere", "", "true")
		if err == nil || !strings.Contains(err.Error(), cluster.ErrNoPod.Error()) {
			t.Fatalf("exec into a pod the agent does not run: %v, want an error naming %q", err, cluster.ErrNoPod)
		}
		t.Logf("refused: %v", err)
	})
}

// asExit is errors.As for the exit error client-go's executors return.
func asExit(err error, target *utilexec.ExitError) bool {
	e, ok := err.(utilexec.ExitError) //nolint:errorlint // client-go returns it unwrapped
	if ok {
		*target = e
	}
	return ok
}

// podExec is `kubectl exec -i -n NS POD -- CMD...` over via ("websocket"
// or "spdy"): its stdout, stderr and error.
func podExec(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, via, ns, pod, stdin string, cmd ...string) (string, string, error) {
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: cmd, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	var (
		ex  remotecommand.Executor
		err error
	)
	if via == "websocket" {
		ex, err = remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	} else {
		ex, err = remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	}
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}
