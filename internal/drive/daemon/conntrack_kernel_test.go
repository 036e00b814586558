//go:build kernel

package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// conntrackSysctls are the /proc/sys files --conntrack-* set.
var conntrackSysctls = []string{
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"net/netfilter/nf_conntrack_tcp_be_liberal",
	"net/netfilter/nf_conntrack_udp_timeout",
	"net/netfilter/nf_conntrack_udp_timeout_stream",
}

// runFlags is `run ARGS`'s configuration, as cmd/ipvs-proxy parses it.
func runFlags(t *testing.T, args ...string) *config.Config {
	t.Helper()
	c := config.Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.AddFlags(fs, func(*pflag.FlagSet, *planner.Options) {})
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return c
}

// readInts reads each file under root (/proc/sys, or /sys for hashsize) as
// the calling thread's namespace shows it.
func readInts(root string, names ...string) (map[string]int, error) {
	out := map[string]int{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(root, n))
		if err != nil {
			return nil, err
		}
		if out[n], err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func mustReadInts(t *testing.T, root string, names ...string) map[string]int {
	t.Helper()
	v, err := readInts(root, names...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// restoreConntrack puts the host namespace's conntrack settings back when
// the test ends: the VM's other tests share its root namespace.
func restoreConntrack(t *testing.T) {
	saved := mustReadInts(t, "/proc/sys", conntrackSysctls...)
	hash := mustReadInts(t, "/", conntrackHashsizeFile[1:])
	t.Cleanup(func() {
		for n, v := range saved {
			if err := os.WriteFile(filepath.Join("/proc/sys", n), []byte(strconv.Itoa(v)), 0o644); err != nil {
				t.Error(err)
			}
		}
		for n, v := range hash {
			if err := os.WriteFile("/"+n, []byte(strconv.Itoa(v)), 0o644); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestKernelConntrackSysctls: `run`'s startup (setSysctls) in the host's
// network namespace sets nf_conntrack_max, hashsize and the timeouts as
// kube-proxy 1.34 does, with its defaults and with every --conntrack-*
// flag, read back from /proc/sys and /sys; a second start changes nothing.
func TestKernelConntrackSysctls(t *testing.T) {
	ktest.NewNode(t) // root, IPVS and conntrack loaded
	restoreConntrack(t)
	cpus := nodeCPUs()
	hash0 := mustReadInts(t, "/", conntrackHashsizeFile[1:])[conntrackHashsizeFile[1:]]
	t.Logf("VM: %d CPUs, nf_conntrack hashsize %d", cpus, hash0)

	// kube-proxy's defaults: max(32768 × CPUs, 131072), 24 h, 1 h; the
	// UDP timeouts and be_liberal left as they are.
	before := mustReadInts(t, "/proc/sys", conntrackSysctls...)
	if err := setSysctls(runFlags(t), zap.NewNop()); err != nil {
		t.Fatalf("setSysctls with kube-proxy's defaults: %v", err)
	}
	got := mustReadInts(t, "/proc/sys", conntrackSysctls...)
	want := map[string]int{
		"net/netfilter/nf_conntrack_max":                     max(32768*cpus, 131072),
		"net/netfilter/nf_conntrack_tcp_timeout_established": 86400,
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  3600,
		"net/netfilter/nf_conntrack_tcp_be_liberal":          before["net/netfilter/nf_conntrack_tcp_be_liberal"],
		"net/netfilter/nf_conntrack_udp_timeout":             before["net/netfilter/nf_conntrack_udp_timeout"],
		"net/netfilter/nf_conntrack_udp_timeout_stream":      before["net/netfilter/nf_conntrack_udp_timeout_stream"],
	}
	diffInts(t, "kube-proxy's defaults", got, want)

	// Every flag, with a table big enough that hashsize must grow to a
	// quarter of it.
	perCore := 8 * hash0 // a quarter of perCore × CPUs is ≥ 2 × hash0: hashsize grows
	args := []string{"--conntrack-max-per-core=" + strconv.Itoa(perCore), "--conntrack-min=1000",
		"--conntrack-tcp-timeout-established=2h", "--conntrack-tcp-timeout-close-wait=30m", "--conntrack-tcp-be-liberal",
		"--conntrack-udp-timeout=45s", "--conntrack-udp-timeout-stream=3m"}
	core, logs := observer.New(zap.InfoLevel)
	if err := setSysctls(runFlags(t, args...), zap.New(core)); err != nil {
		t.Fatalf("setSysctls %v: %v", args, err)
	}
	got = mustReadInts(t, "/proc/sys", conntrackSysctls...)
	wantMax := perCore * cpus
	want = map[string]int{
		"net/netfilter/nf_conntrack_max":                     wantMax,
		"net/netfilter/nf_conntrack_tcp_timeout_established": 7200,
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  1800,
		"net/netfilter/nf_conntrack_tcp_be_liberal":          1,
		"net/netfilter/nf_conntrack_udp_timeout":             45,
		"net/netfilter/nf_conntrack_udp_timeout_stream":      180,
	}
	diffInts(t, strings.Join(args, " "), got, want)
	if h := mustReadInts(t, "/", conntrackHashsizeFile[1:])[conntrackHashsizeFile[1:]]; h != wantMax/4 {
		t.Errorf("hashsize %d after nf_conntrack_max=%d, want %d (a quarter, as kube-proxy)", h, wantMax, wantMax/4)
	}
	if n := logs.FilterMessage("set conntrack hashsize").Len(); n != 1 {
		t.Errorf("%d 'set conntrack hashsize' lines, want 1", n)
	}

	// A second start with the same flags writes nothing.
	core, logs = observer.New(zap.InfoLevel)
	if err := setSysctls(runFlags(t, args...), zap.New(core)); err != nil {
		t.Fatal(err)
	}
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "conntrack") || e.Message == "set sysctl" && strings.Contains(e.ContextMap()["name"].(string), "netfilter") {
			t.Errorf("second start logged %q %v: conntrack's settings were already set", e.Message, e.ContextMap())
		}
	}
}

// TestKernelConntrackSysctlsPodNamespace: in a network namespace other
// than the host's, where the kernel makes nf_conntrack_max read-only,
// `run`'s startup sets the per-namespace timeouts, leaves nf_conntrack_max
// and hashsize with one info line saying why (kube-proxy exits there), and
// fails nothing; the host's values do not move.
func TestKernelConntrackSysctlsPodNamespace(t *testing.T) {
	node := ktest.NewNode(t)
	restoreConntrack(t)
	hostBefore := mustReadInts(t, "/proc/sys", conntrackSysctls...)
	hashName := conntrackHashsizeFile[1:]
	hashBefore := mustReadInts(t, "/", hashName)[hashName]
	// A table size the host does not have, so that kube-proxy would write.
	args := []string{"--conntrack-max-per-core=" + strconv.Itoa(hostBefore["net/netfilter/nf_conntrack_max"]/nodeCPUs()+1),
		"--conntrack-min=0", "--conntrack-tcp-timeout-established=3h", "--conntrack-udp-timeout=40s"}
	c := runFlags(t, args...)

	core, logs := observer.New(zap.InfoLevel)
	var inNode map[string]int
	var mode os.FileMode
	err := node.Do(func() error {
		fi, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_max")
		if err != nil {
			return err
		}
		mode = fi.Mode().Perm()
		if err := setSysctls(c, zap.New(core)); err != nil {
			return err
		}
		inNode, err = readInts("/proc/sys", conntrackSysctls...)
		return err
	})
	if err != nil {
		t.Fatalf("setSysctls %v in %s: %v", args, node.Name, err)
	}
	t.Logf("nf_conntrack_max in %s: mode %v", node.Name, mode)
	if inNode["net/netfilter/nf_conntrack_tcp_timeout_established"] != 3*3600 || inNode["net/netfilter/nf_conntrack_udp_timeout"] != 40 {
		t.Errorf("node namespace's timeouts %v, want established 10800 and udp 40", inNode)
	}
	if inNode["net/netfilter/nf_conntrack_max"] != hostBefore["net/netfilter/nf_conntrack_max"] {
		t.Errorf("nf_conntrack_max %d seen from the node namespace, want the host's %d", inNode["net/netfilter/nf_conntrack_max"], hostBefore["net/netfilter/nf_conntrack_max"])
	}
	readOnlyLines := logs.FilterMessageSnippet("nf_conntrack_max is read-only in this network namespace")
	if readOnlyLines.Len() != 1 {
		t.Errorf("%d lines saying nf_conntrack_max is read-only here, want 1; the log:\n%v", readOnlyLines.Len(), logs.All())
	}
	for _, e := range logs.All() {
		if e.Level > zap.InfoLevel {
			t.Errorf("%v line %q %v: a namespace where nf_conntrack_max is read-only is no warning", e.Level, e.Message, e.ContextMap())
		}
	}
	diffInts(t, "the host's sysctls after a start in "+node.Name, mustReadInts(t, "/proc/sys", conntrackSysctls...), hostBefore)
	if h := mustReadInts(t, "/", hashName)[hashName]; h != hashBefore {
		t.Errorf("hashsize %d after a start in %s, want %d unchanged", h, node.Name, hashBefore)
	}
}

func diffInts(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: %s = %d, want %d", what, n, got[n], w)
		}
	}
}
