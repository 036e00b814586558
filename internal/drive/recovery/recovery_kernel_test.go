//go:build kernel

package recovery

// The externalIP = node IP disaster in a real kernel, with two nodes as two
// namespaces on one bridge: node A (ktest's node, 198.51.100.1 on its LAN
// bridge eth0) and node B (198.51.100.2, a namespace plugged into that
// bridge). An older proxy bound B's address on A's kube-ipvs0 with a virtual
// server on it; A cannot reach B any more. The real ipvs-proxy binary,
// executed inside A's namespace with no API server reachable, finds and
// strips it and nothing else. Build the binary first:
//
//	go build -o /tmp/ipvs-proxy ./cmd/ipvs-proxy
//	go test -c -tags kernel -o /tmp/recovery.test ./internal/drive/recovery/
//	go run ./test/vmtest/cmd/vmrun -- /tmp/recovery.test -test.v
//
// `make test-kernel` builds bin/ipvs-proxy first (mk/recovery.mk); the test
// takes the newer of bin/ipvs-proxy and /tmp/ipvs-proxy, or IPVS_PROXY_BIN.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

const (
	nodeB      = "198.51.100.2"
	foreignVIP = "198.51.100.50" // keepalived's VRRP address on A's eth0
	clusterVIP = "10.96.0.10"
	// unreachableAPI is on the LAN but nobody has it: connects time out.
	unreachableAPI = "198.51.100.99"
	gateway        = "198.51.100.254"
)

func proxyBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("IPVS_PROXY_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("IPVS_PROXY_BIN: %v", err)
		}
		return bin
	}
	// `make build` (a prerequisite of `make test-kernel`, mk/recovery.mk)
	// or the manual build; the newer wins. Tests run in the package's
	// source directory.
	var best string
	var newest time.Time
	for _, bin := range []string{filepath.Join("..", "..", "..", "bin", "ipvs-proxy"), "/tmp/ipvs-proxy"} {
		if st, err := os.Stat(bin); err == nil && st.ModTime().After(newest) {
			best, newest = bin, st.ModTime()
		}
	}
	if best == "" {
		t.Fatal("no ipvs-proxy binary: make build (or go build -o /tmp/ipvs-proxy ./cmd/ipvs-proxy, or set IPVS_PROXY_BIN)")
	}
	abs, err := filepath.Abs(best)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// runProxy executes the binary inside ns and returns stdout, stderr and the
// exit status.
func runProxy(t *testing.T, ns *ktest.NS, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := proxyBin(t)
	var out, errb bytes.Buffer
	err := ns.Do(func() error {
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		return cmd.Run()
	})
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("ipvs-proxy %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ ipvs-proxy %s   (exit %d)\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
	return out.String(), errb.String(), code
}

// listen serves name on TCP port in ns: every connection gets "NAME\n".
func listen(t *testing.T, ns *ktest.NS, name string, port int) {
	t.Helper()
	serveTCP(t, ns, port, func(c net.Conn) {
		_, _ = c.Write([]byte(name + " " + c.RemoteAddr().(*net.TCPAddr).IP.String() + "\n"))
	})
}

// serveTCP listens on TCP port in ns and runs handle on each connection
// in its own goroutine, closing it after, until the test ends.
func serveTCP(t *testing.T, ns *ktest.NS, port int, handle func(net.Conn)) {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { handle(c); c.Close() }()
		}
	}()
}

// writeNodeCache writes what `run` caches in --state-dir: both nodes'
// addresses.
func writeNodeCache(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data := fmt.Sprintf(`{"updated":"2026-11-23T12:00:00Z","nodes":{"a":[%q],"b":[%q]}}`, ktest.NodeIPv4, nodeB)
	if err := os.WriteFile(filepath.Join(dir, "node-addresses.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeKubeconfig points at an API server nobody answers for.
func writeKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://%s:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: x}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`, unreachableAPI)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDisasterRecover(t *testing.T) {
	a := ktest.NewNode(t)
	pod := a.AddPod(t, "pod-a", "10.244.0.2")
	b := a.AddClient(t, "node-b", nodeB)
	listen(t, b.NS, "node-b", 6443)  // B's API server
	listen(t, b.NS, "node-b", 10250) // B's kubelet
	client := a.AddClient(t, "client", "198.51.100.20")

	// Before: A reaches B.
	if got := a.MustRequest(t, ktest.TCP, nodeB+":6443"); !strings.HasPrefix(got, "node-b ") {
		t.Fatalf("before the disaster A -> B:6443 answered %q", got)
	}

	// What the proxy legitimately owns: a ClusterIP with its virtual server.
	// What others own: keepalived's address on eth0 with its virtual server,
	// and a manual one on A's own address outside the NodePort range.
	// The disaster: an older proxy bound B's address (a Service's
	// externalIP) on A's kube-ipvs0, with a virtual server for its port.
	rs := pod.Addrs[0].String() + ":8080"
	a.RunInput(t, fmt.Sprintf("link add kube-ipvs0 type dummy\naddr add %s/32 dev kube-ipvs0\naddr add %s/24 dev eth0\naddr add %s/32 dev kube-ipvs0\n",
		clusterVIP, foreignVIP, nodeB), "ip", "-batch", "-")
	a.RunInput(t, fmt.Sprintf(`-A -t %[1]s:80 -s rr
-a -t %[1]s:80 -r %[4]s -m -w 1
-A -t %[2]s:80 -s wlc
-a -t %[2]s:80 -r %[4]s -m -w 1
-A -t %[5]s:8443 -s rr
-a -t %[5]s:8443 -r %[4]s -m -w 1
-A -t %[3]s:6443 -s rr
-a -t %[3]s:6443 -r %[4]s -m -w 1
`, clusterVIP, foreignVIP, nodeB, rs, ktest.NodeIPv4), "ipvsadm", "-R")
	// Two more an older proxy might have bound: A's own address (its
	// NodePort-like server on 8443 must stay: the address stays on eth0) and
	// A's default gateway.
	a.RunInput(t, fmt.Sprintf("route add default via %[1]s\naddr add %[1]s/32 dev kube-ipvs0\naddr add %[2]s/32 dev kube-ipvs0\n", gateway, ktest.NodeIPv4),
		"ip", "-batch", "-")
	before := a.Run(t, "ipvsadm", "-S", "-n")
	t.Logf("A's table:\n%s\nA's kube-ipvs0:\n%s", before, a.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0"))

	// The symptom: A's requests to B never reach B.
	if got, err := a.Request(ktest.TCP, nodeB+":6443"); err == nil && strings.HasPrefix(got, "node-b ") {
		t.Fatalf("disaster not reproduced: A -> B:6443 answered %q", got)
	} else {
		t.Logf("A -> B:6443 with the disaster: %q %v", got, err)
	}
	if got, err := a.Request(ktest.TCP, nodeB+":10250"); err == nil {
		t.Fatalf("disaster not reproduced: A -> B:10250 answered %q", got)
	} else {
		t.Logf("A -> B:10250 with the disaster: %v", err)
	}

	state := writeNodeCache(t)
	kubeconfig := writeKubeconfig(t)
	args := []string{"recover", "--state-dir", state, "--kubeconfig", kubeconfig, "--timeout", "2s", "--hostname-override", "a"}

	// Dry run: exit 3 (found), B's address reported with its virtual server, nothing changed.
	out, _, code := runProxy(t, a.NS, append(args, "-o", "json")...)
	if code != 3 {
		t.Fatalf("dry run exit %d, want 3", code)
	}
	var rep struct {
		APIServer string `json:"apiServer"`
		Findings  []struct {
			Address        string   `json:"address"`
			Reason         string   `json:"reason"`
			VirtualServers []string `json:"virtualServers"`
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.APIServer, "unreachable") {
		t.Errorf("apiServer %q, want unreachable", rep.APIServer)
	}
	var found []string
	for _, f := range rep.Findings {
		found = append(found, fmt.Sprintf("%s %s %v", f.Address, f.Reason, f.VirtualServers))
	}
	want := []string{
		ktest.NodeIPv4.String() + "/32 NodeIP []", // kept: 198.51.100.1:8443 is not ours to drop
		nodeB + "/32 NodeIP [-t " + nodeB + ":6443]",
		gateway + "/32 Gateway []",
	}
	if strings.Join(found, "\n") != strings.Join(want, "\n") {
		t.Fatalf("dry run findings:\n%s\nwant:\n%s", strings.Join(found, "\n"), strings.Join(want, "\n"))
	}
	if got := a.Run(t, "ipvsadm", "-S", "-n"); got != before {
		t.Fatalf("dry run changed the table:\n%s", got)
	}
	runProxy(t, a.NS, args...) // the text table, for the log

	// Apply: exit 0 (removed).
	if _, _, code := runProxy(t, a.NS, append(args, "--apply")...); code != 0 {
		t.Fatalf("--apply exit %d, want 0", code)
	}

	// A reaches B again, with real TCP requests.
	for _, port := range []string{"6443", "10250"} {
		if got := a.MustRequest(t, ktest.TCP, nodeB+":"+port); !strings.HasPrefix(got, "node-b "+ktest.NodeIPv4.String()) {
			t.Errorf("after recover A -> B:%s answered %q, want node-b seeing %s", port, got, ktest.NodeIPv4)
		}
	}
	// Nothing else went: the ClusterIP serves from A, keepalived's server
	// serves a client, the manual server on A's address is there.
	if got := a.MustRequest(t, ktest.TCP, clusterVIP+":80"); !strings.HasPrefix(got, "pod-a ") {
		t.Errorf("ClusterIP after recover answered %q", got)
	}
	if got := client.MustRequest(t, ktest.TCP, foreignVIP+":80"); got != "pod-a 198.51.100.20" {
		t.Errorf("keepalived's virtual server after recover answered %q", got)
	}
	after := a.Run(t, "ipvsadm", "-S", "-n")
	for _, want := range []string{clusterVIP + ":80", foreignVIP + ":80", ktest.NodeIPv4.String() + ":8443"} {
		if !strings.Contains(after, "-A -t "+want) {
			t.Errorf("virtual server %s removed:\n%s", want, after)
		}
	}
	if strings.Contains(after, nodeB) {
		t.Errorf("virtual server on B's address survived:\n%s", after)
	}
	if got := a.Run(t, "ip", "-o", "-4", "addr", "show", "dev", "kube-ipvs0"); strings.Contains(got, nodeB) || strings.Contains(got, gateway) ||
		strings.Contains(got, ktest.NodeIPv4.String()) || !strings.Contains(got, clusterVIP+"/32") {
		t.Errorf("kube-ipvs0 after recover:\n%s", got)
	}
	if got := a.Run(t, "ip", "-o", "-4", "addr", "show", "dev", "eth0"); !strings.Contains(got, foreignVIP) {
		t.Errorf("foreign address gone from eth0:\n%s", got)
	}

	// Again: nothing left, exit 0.
	if _, _, code := runProxy(t, a.NS, args...); code != 0 {
		t.Errorf("second recover exit %d, want 0", code)
	}
}

func TestCleanupKeepsForeign(t *testing.T) {
	a := ktest.NewNode(t)
	pod := a.AddPod(t, "pod-a", "10.244.0.2")
	client := a.AddClient(t, "client", "198.51.100.20")
	rs := pod.Addrs[0].String() + ":8080"

	// The proxy's: kube-ipvs0 with a ClusterIP, its virtual server, a
	// NodePort server, its chains and ipsets (planned for an empty cluster).
	// Foreign: keepalived's address on eth0 with its virtual server, a
	// manual server on A's address outside the NodePort range, a chain with
	// a jump from INPUT, an ipset.
	a.RunInput(t, fmt.Sprintf("link add kube-ipvs0 type dummy\naddr add %s/32 dev kube-ipvs0\naddr add %s/24 dev eth0\n", clusterVIP, foreignVIP), "ip", "-batch", "-")
	a.RunInput(t, fmt.Sprintf(`-A -t %[1]s:80 -s rr
-a -t %[1]s:80 -r %[3]s -m -w 1
-A -t %[4]s:30080 -s rr
-a -t %[4]s:30080 -r %[3]s -m -w 1
-A -t %[2]s:80 -s wlc
-a -t %[2]s:80 -r %[3]s -m -w 1
-A -t %[4]s:8443 -s rr
-a -t %[4]s:8443 -r %[3]s -m -w 1
`, clusterVIP, foreignVIP, rs, ktest.NodeIPv4), "ipvsadm", "-R")
	if err := a.Do(func() error {
		ap, err := iptableskernel.NewSyncer(nil)
		if err != nil {
			return err
		}
		defer ap.Close()
		sets, rules := emptyPlan()
		return cleanupErr(ap.Full(iptables.Desired{Sets: sets, Rules: rules}))
	}); err != nil {
		t.Fatalf("program the proxy's chains and sets: %v", err)
	}
	a.Run(t, "iptables", "-N", "FOREIGN-CHAIN")
	a.Run(t, "iptables", "-A", "FOREIGN-CHAIN", "-p", "tcp", "--dport", "9", "-j", "DROP")
	a.Run(t, "iptables", "-A", "INPUT", "-j", "FOREIGN-CHAIN")
	a.Run(t, "ipset", "create", "foreign-set", "hash:ip")
	if save := a.Run(t, "iptables-save"); !strings.Contains(save, ":KUBE-IPVS-FILTER") || !strings.Contains(save, "-j KUBE-IPVS-FILTER") {
		t.Fatal("the proxy's rules were not programmed")
	}

	out, _, code := runProxy(t, a.NS, "cleanup")
	if code != 0 {
		t.Fatalf("cleanup exit %d", code)
	}
	if !strings.Contains(out, "2 virtual server(s) deleted; kube-ipvs0 deleted with 1 address(es)") {
		t.Errorf("cleanup said %q", out)
	}
	check := func(when string) {
		t.Helper()
		table := a.Run(t, "ipvsadm", "-S", "-n")
		for _, want := range []string{foreignVIP + ":80", ktest.NodeIPv4.String() + ":8443"} {
			if !strings.Contains(table, "-A -t "+want) {
				t.Errorf("%s: foreign virtual server %s removed:\n%s", when, want, table)
			}
		}
		for _, gone := range []string{clusterVIP + ":80", ktest.NodeIPv4.String() + ":30080"} {
			if strings.Contains(table, gone) {
				t.Errorf("%s: the proxy's virtual server %s survived:\n%s", when, gone, table)
			}
		}
		if _, err := a.Exec("ip", "link", "show", "kube-ipvs0"); err == nil {
			t.Errorf("%s: kube-ipvs0 survived", when)
		}
		if got := a.Run(t, "ip", "-o", "-4", "addr", "show", "dev", "eth0"); !strings.Contains(got, foreignVIP) {
			t.Errorf("%s: foreign address gone from eth0:\n%s", when, got)
		}
		save := a.Run(t, "iptables-save") + a.Run(t, "ip6tables-save")
		if strings.Contains(save, "KUBE-") {
			t.Errorf("%s: the proxy's chains or rules survived:\n%s", when, save)
		}
		if !strings.Contains(save, "-A INPUT -j FOREIGN-CHAIN") || !strings.Contains(save, "-A FOREIGN-CHAIN -p tcp -m tcp --dport 9 -j DROP") {
			t.Errorf("%s: the foreign chain was touched:\n%s", when, save)
		}
		sets := a.Run(t, "ipset", "list", "-n")
		if strings.Contains(sets, "KUBE-") || !strings.Contains(sets, "foreign-set") {
			t.Errorf("%s: ipsets:\n%s", when, sets)
		}
		// keepalived's server still serves, with real traffic.
		if got := client.MustRequest(t, ktest.TCP, foreignVIP+":80"); got != "pod-a 198.51.100.20" {
			t.Errorf("%s: keepalived's virtual server answered %q", when, got)
		}
	}
	check("after cleanup")

	out, _, code = runProxy(t, a.NS, "cleanup")
	if code != 0 || !strings.Contains(out, "0 virtual server(s) deleted; no kube-ipvs0") {
		t.Errorf("second cleanup: exit %d, %q", code, out)
	}
	check("after a second cleanup")
}
