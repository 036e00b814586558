package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
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
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// hostExec runs the commands of one pod as host processes: the API
// server's side of exec is what TestKubeletAPI checks; the guest's agent
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

// hostPods is the bed's node agent for the host test: pod IPs of its pod
// CIDR dialed at loopback servers (the pod proxy's half is what
// TestKubeletAPI checks; the guest's agent dials them from the node's
// namespace) and logs from memory.
type hostPods struct {
	cidr    netip.Prefix
	servers map[netip.AddrPort]string // pod address -> loopback server
	logs    map[string]string         // NAMESPACE/POD/CONTAINER -> output
}

func (h hostPods) DialPod(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	if !h.cidr.Contains(addr.Addr()) {
		return nil, fmt.Errorf("%w: %s is outside %s", cluster.ErrNotNodePod, addr, h.cidr)
	}
	to, ok := h.servers[addr]
	if !ok {
		to = "127.0.0.1:1" // nothing listens: refused, as a pod without the port
	}
	return (&net.Dialer{}).DialContext(ctx, "tcp", to)
}

func (h hostPods) ContainerLog(namespace, pod, container string) (io.ReadCloser, error) {
	log, ok := h.logs[namespace+"/"+pod+"/"+container]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s/%s", cluster.ErrNoPod, namespace, pod, container)
	}
	return io.NopCloser(strings.NewReader(log)), nil
}

// TestKubeletAPI: the API server reaches a node's kubelet API
// (ServeKubelet) and its pods by its own paths, the egress selector's
// CONNECT through the KubeletTunnel. Exec: the pod's node, its Hostname
// address and kubelet port; stdin, stdout, stderr and the exit code come
// back, over websockets (the e2e framework's and kubectl's first choice,
// translated by the API server) and over SPDY. Logs: `kubectl logs`,
// tailLines honoured, follow refused. The pod proxy
// (pods/NAME:PORT/proxy, what the upstream e2e.test's "trying to dial each
// unique pod" uses): the pod's IP routed to its node's kubelet, which
// dials it.
func TestKubeletAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, pod, node = "exec", "execpod", "exec-node"
	podCIDR := netip.MustParsePrefix("10.251.0.0/24")
	podIP := netip.MustParseAddr("10.251.0.5")
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%s from the pod", r.URL.Path)
	}))
	defer web.Close()
	pods := hostPods{cidr: podCIDR,
		servers: map[netip.AddrPort]string{netip.AddrPortFrom(podIP, 80): web.Listener.Addr().String()},
		logs:    map[string]string{ns + "/" + pod + "/agnhost": "one\ntwo\nthree\n"}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := cluster.ServeKubelet(l, node, cluster.NodeRuntime{Exec: hostExec{ns, pod}, Logs: pods, Dial: pods}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	routes := cluster.TunnelRoutes{
		Kubelets: map[string]string{net.JoinHostPort(node, strconv.Itoa(cluster.KubeletPort)): l.Addr().String()},
		Pods:     []cluster.PodRoute{{Prefix: podCIDR, Kubelet: l.Addr().String()}},
	}
	tunnel, egress, err := cluster.StartEgressTunnel(routes, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer tunnel.Close()

	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{egress}})
	client := kubernetes.NewForConfigOrDie(srv.Config())
	if _, err := cluster.RegisterNode(ctx, client, cluster.NodeObject(node, "192.0.2.10", podCIDR.String(), cluster.KubeletPort)); err != nil {
		t.Fatal(err)
	}
	createNamespace(ctx, t, client, ns)
	// execpod at 10.251.0.5 (served on :80), elsewhere at 10.251.0.6
	// (nothing listens), outside at 10.252.0.7 (no route).
	for name, ip := range map[string]string{pod: podIP.String(), "elsewhere": "10.251.0.6", "outside": "10.252.0.7"} {
		p, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agnhost",
				Image: "registry.k8s.io/e2e-test-images/agnhost:2.56", Args: []string{"netexec"},
				Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.WritePodStatus(ctx, client, ns, p.Name, cluster.PodStatus{
			PodIPs: []netip.Addr{netip.MustParseAddr(ip)}, HostIP: netip.MustParseAddr("192.0.2.10"), Ready: true}); err != nil {
			t.Fatal(err)
		}
	}

	for _, via := range []string{"websocket", "spdy"} {
		t.Run("exec via "+via, func(t *testing.T) {
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
	t.Run("exec into a pod the node does not run", func(t *testing.T) {
		_, _, err := podExec(ctx, srv.Config(), client, "websocket", ns, "elsewhere", "", "true")
		if err == nil || !strings.Contains(err.Error(), cluster.ErrNoPod.Error()) {
			t.Fatalf("exec into a pod the agent does not run: %v, want an error naming %q", err, cluster.ErrNoPod)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("logs", func(t *testing.T) {
		logs := func(opts *corev1.PodLogOptions) (string, error) {
			b, err := client.CoreV1().Pods(ns).GetLogs(pod, opts).Do(ctx).Raw()
			return string(b), err
		}
		if got, err := logs(&corev1.PodLogOptions{Container: "agnhost"}); err != nil || got != "one\ntwo\nthree\n" {
			t.Errorf("logs: %q, %v; want the whole output", got, err)
		}
		if got, err := logs(&corev1.PodLogOptions{Container: "agnhost", TailLines: ptr.To(int64(2))}); err != nil || got != "two\nthree\n" {
			t.Errorf("logs --tail=2: %q, %v; want the last two lines", got, err)
		}
		// The API server passes the kubelet's refusal on as the body.
		if got, err := logs(&corev1.PodLogOptions{Container: "agnhost", Follow: true}); err == nil || !strings.Contains(got, "follow=true") {
			t.Errorf("logs -f: %q, %v; want a refusal naming follow", got, err)
		}
	})
	t.Run("pod proxy", func(t *testing.T) {
		get := func(name string) (string, error) {
			b, err := client.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").Name(name).
				SubResource("proxy").Suffix("hostname").Do(ctx).Raw()
			return string(b), err
		}
		got, err := get(pod + ":80")
		if err != nil || got != "/hostname from the pod" {
			t.Fatalf("GET pods/%s:80/proxy/hostname: %q, %v; want the pod's answer", pod, got, err)
		}
		// The port from the pod's first container port, as the e2e
		// framework's "trying to dial each unique pod" asks.
		if got, err := get(pod); err != nil || got != "/hostname from the pod" {
			t.Errorf("GET pods/%s/proxy/hostname: %q, %v; want the pod's answer", pod, got, err)
		}
		for _, name := range []string{"elsewhere:80", "outside:80"} {
			if got, err := get(name); err == nil {
				t.Errorf("GET pods/%s/proxy/hostname: %q; want an error (nothing there)", name, got)
			} else {
				t.Logf("pods/%s/proxy: %v", name, err)
			}
		}
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
