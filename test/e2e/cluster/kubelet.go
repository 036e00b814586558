package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	osexec "os/exec"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/cert"
	remotecommandserver "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// KubeletPort is the port of the bed's kubelet API on every node (the
// Node's status.daemonEndpoints.kubeletEndpoint.Port), kubelet's default.
const KubeletPort = 10250

// Kubelet API stream timeouts, as kubelet's defaults
// (--streaming-connection-idle-timeout 4h; CRI streaming's 30 s to open
// the streams).
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// PodExecutor runs a command in a pod a node agent runs: what the kubelet's
// container runtime does for `kubectl exec` (CRI ExecSync/Exec). A pod it
// does not run is ErrNoPod.
type PodExecutor interface {
	Exec(ctx context.Context, namespace, pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) error
}

// ErrNoPod is returned by a PodExecutor for a pod its node does not run.
var ErrNoPod = errors.New("pod not run on this node")

// KubeletServer is the part of kubelet's API the API server calls on a
// node for the upstream e2e tests: exec (pods/exec, over SPDY or
// websockets, kubelet's own streaming code) and healthz. Logs, attach and
// port-forward are refused with 501 and a message naming what the bed
// lacks, never an empty answer.
type KubeletServer struct {
	node string
	exec PodExecutor
	logf func(format string, args ...any)
	srv  *http.Server
}

// ServeKubelet serves node's kubelet API on l over TLS with a self-signed
// certificate (the API server has no --kubelet-certificate-authority, so
// it does not verify it, as a kubeadm cluster's default) and returns at
// once; Close stops it. logf gets one line per request refused or failed.
func ServeKubelet(l net.Listener, node string, exec PodExecutor, logf func(format string, args ...any)) (*KubeletServer, error) {
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(node, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: serving certificate: %w", node, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: serving certificate: %w", node, err)
	}
	k := &KubeletServer{node: node, exec: exec, logf: logf}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/exec/", k.serveExec)
	mux.HandleFunc("/", k.refuse)
	k.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		_ = k.srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	}()
	return k, nil
}

// Close stops serving; streams under way end with their connections.
func (k *KubeletServer) Close() { _ = k.srv.Close() }

// ExecPath is the pod, container and uid an /exec/ path names:
// /exec/NAMESPACE/POD/CONTAINER or /exec/NAMESPACE/POD/UID/CONTAINER, as
// kubelet routes them.
type ExecPath struct {
	Namespace, Pod, Container string
	UID                       types.UID
}

// ParseExecPath parses an /exec/ path; ok is false for any other shape.
func ParseExecPath(path string) (p ExecPath, ok bool) {
	parts := strings.Split(strings.TrimPrefix(path, "/exec/"), "/")
	for _, s := range parts {
		if s == "" {
			return ExecPath{}, false
		}
	}
	switch len(parts) {
	case 3:
		return ExecPath{Namespace: parts[0], Pod: parts[1], Container: parts[2]}, true
	case 4:
		return ExecPath{Namespace: parts[0], Pod: parts[1], UID: types.UID(parts[2]), Container: parts[3]}, true
	}
	return ExecPath{}, false
}

func (k *KubeletServer) serveExec(w http.ResponseWriter, req *http.Request) {
	p, ok := ParseExecPath(req.URL.Path)
	if !ok || (req.Method != http.MethodGet && req.Method != http.MethodPost) {
		k.logf("kubelet %s: %s %s: not an exec request (want /exec/NAMESPACE/POD[/UID]/CONTAINER)", k.node, req.Method, req.URL.Path)
		http.Error(w, "want GET or POST /exec/NAMESPACE/POD[/UID]/CONTAINER", http.StatusBadRequest)
		return
	}
	cmd := req.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "exec: no command given", http.StatusBadRequest)
		return
	}
	opts, err := remotecommandserver.NewOptions(req)
	if err != nil {
		k.logf("kubelet %s: exec %s/%s: %v", k.node, p.Namespace, p.Pod, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if opts.TTY {
		// The bed's pods have no terminal to give: refuse before upgrading.
		k.logf("kubelet %s: exec %s/%s: a TTY was asked; the bed runs commands without one", k.node, p.Namespace, p.Pod)
		http.Error(w, "exec: the bed's node agent runs commands without a TTY (drop -t)", http.StatusNotImplemented)
		return
	}
	remotecommandserver.ServeExec(w, req, &podExec{k: k, namespace: p.Namespace}, p.Pod, p.UID, p.Container, cmd,
		opts, streamIdleTimeout, streamCreationTimeout, remotecommandconsts.SupportedStreamingProtocols)
}

// refuse answers what the bed's kubelet does not serve.
func (k *KubeletServer) refuse(w http.ResponseWriter, req *http.Request) {
	k.logf("kubelet %s: %s %s refused: the bed's node agent serves only /exec and /healthz", k.node, req.Method, req.URL.Path)
	http.Error(w, fmt.Sprintf("%s is not served by the bed's node agent (it serves /exec and /healthz only: no logs, attach or port-forward)", req.URL.Path),
		http.StatusNotImplemented)
}

// podExec adapts a PodExecutor to kubelet's streaming Executor for one
// namespace.
type podExec struct {
	k         *KubeletServer
	namespace string
}

// ExecInContainer implements remotecommandserver.Executor.
func (e *podExec) ExecInContainer(ctx context.Context, pod string, _ types.UID, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if in == nil {
		in = strings.NewReader("")
	}
	if out == nil {
		out = nopWriteCloser{io.Discard}
	}
	if errOut == nil {
		errOut = nopWriteCloser{io.Discard}
	}
	err := e.k.exec.Exec(ctx, e.namespace, pod, container, cmd, in, out, errOut)
	if err != nil && !isExitError(err) {
		e.k.logf("kubelet %s: exec %s/%s %q: %v", e.k.node, e.namespace, pod, cmd, err)
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// ExitStatus turns a command's exit with a non-zero status (an
// *exec.ExitError, wrapped or not) into the k8s.io/utils/exec error
// kubelet's streaming code reports as "command terminated with non-zero
// exit code" and an exit code cause, as a container runtime's exit does;
// any other error is returned as it is.
func ExitStatus(err error) error {
	var exitErr *osexec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		return utilexec.CodeExitError{Err: err, Code: exitErr.ExitCode()}
	}
	return err
}

func isExitError(err error) bool {
	_, ok := err.(utilexec.ExitError) //nolint:errorlint // ServeExec asserts the type itself, unwrapped
	return ok
}
