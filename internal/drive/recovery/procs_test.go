package recovery

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestMatchProxy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		e       ProcEntry
		want    string // Name, or "" for no match
		cmdline string
	}{
		{"kube-proxy by argv0", ProcEntry{PID: 7, Comm: "kube-proxy", Cmdline: []byte("/usr/local/bin/kube-proxy\x00--config=/var/lib/kube-proxy/config.conf\x00")}, "kube-proxy", "/usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf"},
		{"kube-proxy by comm only", ProcEntry{PID: 8, Comm: "kube-proxy", Cmdline: []byte("proxy\x00")}, "kube-proxy", "proxy"},
		{"kube-proxy by argv0 only", ProcEntry{PID: 9, Comm: "exe", Cmdline: []byte("/opt/kube-proxy\x00")}, "kube-proxy", "/opt/kube-proxy"},
		{"ipvs-proxy run", ProcEntry{PID: 10, Comm: "ipvs-proxy", Cmdline: []byte("/ipvs-proxy\x00run\x00--kubeconfig=/k\x00")}, "ipvs-proxy", "/ipvs-proxy run --kubeconfig=/k"},
		{"ipvs-proxy recover is not a proxy", ProcEntry{PID: 11, Comm: "ipvs-proxy", Cmdline: []byte("ipvs-proxy\x00recover\x00")}, "", ""},
		{"ipvs-proxy without arguments", ProcEntry{PID: 12, Comm: "ipvs-proxy", Cmdline: []byte("ipvs-proxy\x00")}, "", ""},
		{"a kernel thread", ProcEntry{PID: 2, Comm: "kthreadd"}, "", ""},
		{"an editor on a file named kube-proxy", ProcEntry{PID: 13, Comm: "vi", Cmdline: []byte("vi\x00kube-proxy\x00")}, "", ""},
		{"kube-proxy-like name", ProcEntry{PID: 14, Comm: "kube-proxy-x", Cmdline: []byte("kube-proxy-x\x00")}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := MatchProxy(tc.e)
			if ok != (tc.want != "") || p.Name != tc.want {
				t.Fatalf("MatchProxy = %+v, %v; want %q", p, ok, tc.want)
			}
			if ok && (p.PID != tc.e.PID || p.Cmdline != tc.cmdline) {
				t.Errorf("MatchProxy = %+v; want pid %d cmdline %q", p, tc.e.PID, tc.cmdline)
			}
		})
	}
}

// TestFindProxiesReal starts a process whose executable is named
// kube-proxy and finds it in the real /proc.
func TestFindProxiesReal(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kube-proxy")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// The child inherits the network namespace of the thread that forks
	// it, and FindProxies compares with the calling thread's: one thread
	// for both. (Kernel tests of this package move threads into test
	// namespaces; any thread can be the one a goroutine runs on.)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs, err := FindProxies("/proc")
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(procs, func(p Process) bool { return p.PID == cmd.Process.Pid }); i >= 0 {
			if procs[i].Name != "kube-proxy" || procs[i].Cmdline != bin+" 30" {
				t.Errorf("found %+v", procs[i])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-proxy pid %d not found in %+v", cmd.Process.Pid, procs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFindProxiesFakeRoot(t *testing.T) {
	root := t.TempDir()
	write := func(pid, comm, cmdline string) {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644)
		_ = os.WriteFile(filepath.Join(dir, "cmdline"), []byte(cmdline), 0o644)
	}
	netns := func(pid, ns string) {
		dir := filepath.Join(root, pid, "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ns, filepath.Join(dir, "net")); err != nil {
			t.Fatal(err)
		}
	}
	write("300", "kube-proxy", "kube-proxy\x00--v=2\x00")
	write("20", "ipvs-proxy", "ipvs-proxy\x00run\x00")
	write("21", "bash", "bash\x00")
	// Another node's proxy of a test bed, or a pod's: another network
	// namespace, another kube-ipvs0.
	write("22", "ipvs-proxy", "ipvs-proxy\x00run\x00")
	netns("thread-self", "net:[4026531840]")
	netns("300", "net:[4026531840]")
	netns("22", "net:[4026532999]")
	procs, err := FindProxies(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 || procs[0].PID != 20 || procs[1].PID != 300 || procs[1].Name != "kube-proxy" {
		t.Fatalf("FindProxies = %+v, want pids 20 (network namespace unreadable: kept) and 300 (same namespace)", procs)
	}
	if _, err := FindProxies(filepath.Join(root, "missing")); err == nil {
		t.Error("no error for a missing proc root")
	}
}
