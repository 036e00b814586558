package harness

import (
	"cmp"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// Proxy is one `ipvs-proxy run` of a test: the binary, its credentials and
// the flags a DaemonSet's pod on that node would pass. The zero value of a
// field is its default.
type Proxy struct {
	// Bin is the proxy's binary (gobuild.Proxy).
	Bin string
	// Kubeconfig is the file of the proxy's own credentials.
	Kubeconfig string
	// Node is --hostname-override, the Node the proxy serves.
	Node string
	// ClusterCIDR is --cluster-cidr; default 10.244.0.0/16.
	ClusterCIDR string
	// SyncPeriod is --sync-period; default 5s.
	SyncPeriod time.Duration
	// StateDir is --state-dir; default a fresh directory. A restarted proxy
	// keeps its predecessor's, as a DaemonSet's hostPath does.
	StateDir string
	// Log is the file of its output; default proxy.log in a fresh directory.
	Log string
	// HealthzAddr and MetricsAddr are the listeners; default
	// 127.0.0.1:10256 and 127.0.0.1:10249.
	HealthzAddr, MetricsAddr string
	// NoHealthz turns the health server off (--healthz-bind-address ""),
	// for a test that restarts the proxy faster than the port frees.
	NoHealthz bool
	// LogFormat is --log-format; default console.
	LogFormat string
	// LogLevel is --log-level; default debug.
	LogLevel string
	// Config is --config, the file of a DaemonSet's pod: its settings
	// stand, so Kubeconfig, ClusterCIDR, SyncPeriod and the listeners are
	// not passed as flags.
	Config string
	// Env are environment entries (GOGC=50) the proxy runs with; env(1)
	// execs it, so the process is still the proxy's.
	Env []string
	// Flags are further flags, such as --protected-cidrs.
	Flags []string
}

// StartProxy runs p in ns. Like ns.Start, it kills the process at the end
// of the test and prints its log's tail if the test failed.
func StartProxy(t testing.TB, ns *ktest.NS, p Proxy) *ktest.Process {
	t.Helper()
	dir := t.TempDir()
	healthz := cmp.Or(p.HealthzAddr, "127.0.0.1:10256")
	if p.NoHealthz {
		healthz = ""
	}
	args := []string{"run", "--hostname-override", p.Node,
		"--state-dir", cmp.Or(p.StateDir, filepath.Join(dir, "state")),
		"--log-level", cmp.Or(p.LogLevel, "debug"), "--log-format", cmp.Or(p.LogFormat, "console")}
	if p.Config != "" {
		args = append(args, "--config", p.Config)
	} else {
		args = append(args, "--kubeconfig", p.Kubeconfig,
			"--cluster-cidr", cmp.Or(p.ClusterCIDR, "10.244.0.0/16"),
			"--sync-period", cmp.Or(p.SyncPeriod, 5*time.Second).String(),
			"--healthz-bind-address", healthz,
			"--metrics-bind-address", cmp.Or(p.MetricsAddr, "127.0.0.1:10249"))
	}
	args = append(args, p.Flags...)
	log := cmp.Or(p.Log, filepath.Join(dir, "proxy.log"))
	if len(p.Env) > 0 {
		return ns.Start(t, log, "env", append(append(slices.Clone(p.Env), p.Bin), args...)...)
	}
	return ns.Start(t, log, p.Bin, args...)
}
