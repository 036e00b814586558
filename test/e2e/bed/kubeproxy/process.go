package kubeproxy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// Sentinel errors of a Process; check with errors.Is.
var (
	// ErrExited: kube-proxy is no longer running (its log says why).
	ErrExited = errors.New("kubeproxy: kube-proxy exited")
	// ErrNoSync: kube-proxy did not complete a sync in time.
	ErrNoSync = errors.New("kubeproxy: no sync")
)

// Options start one kube-proxy.
type Options struct {
	// Bin is the kube-proxy binary (Binary).
	Bin string
	// NodeName is --hostname-override: the Node object kube-proxy reads its
	// addresses from, which must exist before it starts.
	NodeName string
	// ConfigFile is --config, written by Config.WriteFile.
	ConfigFile string
	// LogFile receives stdout and stderr; empty means a file in t.TempDir().
	LogFile string
	// Verbosity is --v (kubeadm's DaemonSet passes none: 0). 2 logs every
	// sync's duration.
	Verbosity int
	// NoModules runs kube-proxy with an empty /lib/modules, as a pod
	// without kubeadm's lib-modules volume sees it: its start-up cleanup's
	// `modprobe -va ip_vs` fails, so it leaves IPVS and kube-ipvs0 alone
	// (pkg/proxy/ipvs.CleanupLeftovers in v1.34).
	NoModules bool
}

// Process is one kube-proxy running in a node namespace: a ktest.Process
// (Alive, Wait, Output, Tail, Log: the output file) with kube-proxy's
// health, metrics and exit semantics.
type Process struct {
	*ktest.Process
	ns *ktest.NS
}

// Start runs `ip netns exec NODE kube-proxy --config=FILE
// --hostname-override=NAME --v=N`, the command of kubeadm's DaemonSet, in
// ns. A kube-proxy still running at the end of the test is killed; when the
// test failed, the tail of its log is logged.
func Start(t testing.TB, ns *ktest.NS, o Options) *Process {
	t.Helper()
	logFile := o.LogFile
	if logFile == "" {
		logFile = filepath.Join(t.TempDir(), "kube-proxy.log")
	}
	// The image runs /usr/local/bin/kube-proxy: under that name, as
	// /proc/PID/comm and argv[0] show it (what `ipvs-proxy cleanup` looks for
	// before it removes anything), not as the cache's kube-proxy-VERSION.
	bin := filepath.Join(t.TempDir(), "kube-proxy")
	if err := os.Symlink(o.Bin, bin); err != nil {
		t.Fatalf("kube-proxy under its own name: %v", err)
	}
	args := []string{bin, "--config=" + o.ConfigFile, "--hostname-override=" + o.NodeName, "--v=" + strconv.Itoa(o.Verbosity)}
	if o.NoModules {
		// A mount namespace of its own with a tmpfs on /lib/modules; every
		// step execs, so the pid and comm stay kube-proxy's.
		args = append([]string{"--mount", "--propagation", "private", "sh", "-c",
			`mount -t tmpfs lib-modules /lib/modules && exec "$0" "$@"`}, args...)
		return &Process{ns: ns, Process: ns.Start(t, logFile, "unshare", args...)}
	}
	return &Process{ns: ns, Process: ns.Start(t, logFile, args[0], args[1:]...)}
}

// Pid is the process id of `ip netns exec`, which execs kube-proxy.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Stop sends SIGTERM, as the kubelet does when a DaemonSet rollout deletes
// the pod, and waits up to timeout for kube-proxy to exit. It returns how
// long the exit took and the exit status: nil when kube-proxy exited 0 or
// was ended by that SIGTERM, which is its normal way out (kube-proxy
// v1.34.4 installs no signal handler: cmd/kube-proxy and pkg/proxy import
// no os/signal), else an *exec.ExitError; ErrExited if it had exited before.
func (p *Process) Stop(timeout time.Duration) (time.Duration, error) {
	if exited, err := p.Wait(0); exited {
		return 0, fmt.Errorf("%w before SIGTERM: %v", ErrExited, err)
	}
	took, err := p.Process.Stop(timeout)
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return took, nil
		}
	}
	return took, err
}

// Healthz is GET /healthz on HealthzAddress: the status code and body.
func (p *Process) Healthz() (int, string, error) {
	return p.ns.HTTPGet(HealthzAddress, "/healthz", 5*time.Second)
}

// Metrics reads /metrics on MetricsAddress.
func (p *Process) Metrics() (Metrics, error) {
	code, body, err := p.ns.HTTPGet(MetricsAddress, "/metrics", 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy /metrics: %w", err)
	}
	if code != 200 {
		return nil, fmt.Errorf("kube-proxy /metrics: status %d", code)
	}
	return ParseMetrics(body)
}

// LastSyncMetric is the gauge kube-proxy sets, per IP family (label
// ip_family), at the end of every successful sync of that family's rules.
const LastSyncMetric = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"

// LastSync is when the node's rules were last synced in every family:
// the oldest of the kubeproxy_sync_proxy_rules_last_timestamp_seconds
// series (one per ip_family), zero before each family's first sync.
// families is how many series to expect (2 on a dual-stack node).
func (p *Process) LastSync(families int) (time.Time, error) {
	m, err := p.Metrics()
	if err != nil {
		return time.Time{}, err
	}
	var oldest float64
	n := 0
	for k, v := range m {
		if !strings.HasPrefix(k, LastSyncMetric+"{") {
			continue
		}
		n++
		if v == 0 {
			return time.Time{}, nil
		}
		if oldest == 0 || v < oldest {
			oldest = v
		}
	}
	if n < families {
		return time.Time{}, nil
	}
	return time.Unix(0, int64(oldest*1e9)), nil
}

// WaitSync polls the metrics every 100 ms until every one of families
// synced after after (the zero time: any sync) and returns LastSync. It
// fails with ErrExited when kube-proxy exits and ErrNoSync after timeout.
func (p *Process) WaitSync(families int, after time.Time, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if exited, err := p.Wait(0); exited {
			return time.Time{}, fmt.Errorf("%w: %w; log:\n%s", ErrExited, err, p.Tail(30))
		}
		ts, err := p.LastSync(families)
		if err == nil && !ts.IsZero() && ts.After(after) {
			return ts, nil
		}
		last = err
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%w after %v within %v (last metrics error: %v); log:\n%s",
				ErrNoSync, after.Format(time.RFC3339Nano), timeout, last, p.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
