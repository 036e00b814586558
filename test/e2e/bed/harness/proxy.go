package harness

import (
	"cmp"
	"path/filepath"
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
	// LogFormat is --log-format; default console (at --log-level debug).
	LogFormat string
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
	args := []string{"run", "--kubeconfig", p.Kubeconfig, "--hostname-override", p.Node,
		"--cluster-cidr", cmp.Or(p.ClusterCIDR, "10.244.0.0/16"),
		"--sync-period", cmp.Or(p.SyncPeriod, 5*time.Second).String(),
		"--state-dir", cmp.Or(p.StateDir, filepath.Join(dir, "state")),
		"--healthz-bind-address", healthz,
		"--metrics-bind-address", cmp.Or(p.MetricsAddr, "127.0.0.1:10249"),
		"--log-level", "debug", "--log-format", cmp.Or(p.LogFormat, "console")}
	return ns.Start(t, cmp.Or(p.Log, filepath.Join(dir, "proxy.log")), p.Bin, append(args, p.Flags...)...)
}
