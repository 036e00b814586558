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

// NodeRuntime is what a node agent gives its kubelet API: a nil field's
// requests are refused with 501 and a message naming what is missing.
type NodeRuntime struct {
	// Exec runs commands in pods (pods/exec).
	Exec PodExecutor
	// Logs reads containers' output (pods/log).
	Logs ContainerLogs
	// Dial reaches the node's pods over the network: the API server's pod
	// proxy, through the KubeletTunnel's pod routes (podconnect.go).
	Dial PodDialer
}

// KubeletServer is the part of kubelet's API the API server calls on a
// node for the upstream e2e tests: exec (pods/exec, over SPDY or
// websockets, kubelet's own streaming code), container logs (pods/log),
// healthz, and HTTP CONNECT to the node's pods (a kubelet has none: it
// stands in for the network between the API server and the pods, see
// podconnect.go). Attach and port-forward are refused with 501 and a
// message naming what the bed lacks, never an empty answer.
type KubeletServer struct {
	node string
	rt   NodeRuntime
	logf func(format string, args ...any)
	srv  *http.Server
}

// ServeKubelet serves node's kubelet API on l over TLS with a self-signed
// certificate (the API server has no --kubelet-certificate-authority, so
// it does not verify it, as a kubeadm cluster's default) and returns at
// once; Close stops it. logf gets one line per request refused or failed.
func ServeKubelet(l net.Listener, node string, rt NodeRuntime, logf func(format string, args ...any)) (*KubeletServer, error) {
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(node, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: serving certificate: %w", node, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("kubelet %s: serving certificate: %w", node, err)
	}
	k := &KubeletServer{node: node, rt: rt, logf: logf}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/exec/", k.serveExec)
	mux.HandleFunc("/containerLogs/", k.serveLogs)
	mux.HandleFunc("/", k.refuse)
	// CONNECT's target is an authority, not a path: it bypasses the mux.
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodConnect {
			k.serveConnect(w, req)
			return
		}
		mux.ServeHTTP(w, req)
	})
	k.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
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
	if k.rt.Exec == nil {
		k.refuse(w, req)
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
	served := k.served()
	k.logf("kubelet %s: %s %s refused: the bed's node agent serves only %s", k.node, req.Method, req.URL.Path, served)
	http.Error(w, fmt.Sprintf("%s %s is not served by the bed's node agent (it serves %s only: no attach or port-forward)", req.Method, req.URL.Path, served),
		http.StatusNotImplemented)
}

// served names what this kubelet API answers, for refusals.
func (k *KubeletServer) served() string {
	s := []string{"/healthz"}
	if k.rt.Exec != nil {
		s = append(s, "/exec")
	}
	if k.rt.Logs != nil {
		s = append(s, "/containerLogs")
	}
	if k.rt.Dial != nil {
		s = append(s, "CONNECT to its pods")
	}
	return strings.Join(s, ", ")
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
	err := e.k.rt.Exec.Exec(ctx, e.namespace, pod, container, cmd, in, out, errOut)
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
