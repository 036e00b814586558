package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/recovery"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// fakeRecoveryNode is node A (198.51.100.1/24): a legitimate VIP
// 10.96.0.10 with its virtual server, node B's 198.51.100.2 bound with a
// virtual server on it, and a foreign virtual server on 203.0.113.5.
type fakeRecoveryNode struct {
	link  *addrmgrtest.FakeLink
	table *ipvstest.FakeTable
}

func (f *fakeRecoveryNode) Read() (*recovery.Node, error) {
	bound, _ := f.link.Addrs()
	vs, _ := f.table.Services()
	return &recovery.Node{
		LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.1/24")},
		Gateways:      []netip.Addr{netip.MustParseAddr("198.51.100.254")},
		HasDevice:     true, Bound: bound, HasIPVS: true, VirtualServers: vs,
	}, nil
}
func (f *fakeRecoveryNode) Link() addrmgr.Link { return f.link }
func (f *fakeRecoveryNode) Table() ipvs.Table  { return f.table }

func newFakeRecoveryNode() *fakeRecoveryNode {
	vs := func(a string, port uint16) ipvs.VirtualServer {
		return ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr(a), Port: port}, Scheduler: "rr"}
	}
	return &fakeRecoveryNode{
		link:  addrmgrtest.NewFakeLink(netip.MustParsePrefix("10.96.0.10/32"), netip.MustParsePrefix("198.51.100.2/32")),
		table: ipvstest.NewFakeTable(vs("10.96.0.10", 80), vs("198.51.100.2", 6443), vs("203.0.113.5", 80)),
	}
}

// stateDir writes a node address cache with a fixed time.
func stateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data := `{"updated": "2026-11-23T10:00:00Z", "nodes": {"a": ["198.51.100.1"], "b": ["198.51.100.2"]}}`
	if err := os.WriteFile(filepath.Join(dir, "node-addresses.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// useFakeKernel also hides any in-cluster configuration of the machine the
// tests run on: recover is offline unless a test says otherwise.
func useFakeKernel(t *testing.T, n *fakeRecoveryNode) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	old := openRecoveryKernel
	openRecoveryKernel = func() (recovery.NodeKernel, func(), error) { return n, func() {}, nil }
	t.Cleanup(func() { openRecoveryKernel = old })
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "recover", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestRecoverCommand(t *testing.T) {
	n := newFakeRecoveryNode()
	useFakeKernel(t, n)
	dir := stateDir(t)
	base := []string{"recover", "--state-dir", dir, "--hostname-override", "a", "--proc-root", "-"}

	// Dry run, text: exit 1, nothing changed.
	var out, errb bytes.Buffer
	code := Main(base, nil, &out, &errb)
	if code != exitFound {
		t.Fatalf("dry run exit %d, want %d; stderr %s", code, exitFound, errb.String())
	}
	checkGolden(t, "dry-run.golden", out.String())
	if !strings.Contains(errb.String(), "dry run, nothing changed") {
		t.Errorf("stderr: %q", errb.String())
	}
	if n.link.Mutations+n.table.Mutations != 0 {
		t.Fatal("dry run changed the node")
	}

	// Dry run, JSON.
	out.Reset()
	if code := Main(append(base, "-o", "json"), nil, &out, &errb); code != exitFound {
		t.Fatalf("json dry run exit %d", code)
	}
	checkGolden(t, "dry-run.json.golden", out.String())
	var j recoverJSON
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Findings) != 1 || j.Findings[0].Reason != model.ReasonNodeIP || j.ExitCode != exitFound {
		t.Errorf("json: %+v", j)
	}

	// Apply: exit 2, exactly node B's address and its virtual server go.
	out.Reset()
	errb.Reset()
	if code := Main(append(base, "--apply"), nil, &out, &errb); code != exitOK {
		t.Fatalf("apply exit %d, want %d (removed is success); stderr %s", code, exitOK, errb.String())
	}
	checkGolden(t, "apply.golden", out.String())
	if !strings.Contains(errb.String(), "removed address") || !strings.Contains(errb.String(), "NodeIP") {
		t.Errorf("no removal log line on stderr: %q", errb.String())
	}
	if got := n.link.String(); got != "10.96.0.10/32\n" {
		t.Errorf("kube-ipvs0 after apply: %q", got)
	}
	if got := n.table.String(); strings.Contains(got, "198.51.100.2") || !strings.Contains(got, "203.0.113.5:80") || !strings.Contains(got, "10.96.0.10:80") {
		t.Errorf("IPVS after apply:\n%s", got)
	}

	// Again: nothing left, exit 0.
	out.Reset()
	if code := Main(append(base, "--apply"), nil, &out, &errb); code != exitOK {
		t.Fatalf("second apply exit %d, want 0", code)
	}
}

func TestRecoverCommandFailures(t *testing.T) {
	n := newFakeRecoveryNode()
	n.table.Fail = func(string, ipvs.Key) error { return os.ErrPermission }
	useFakeKernel(t, n)
	var out, errb bytes.Buffer
	args := []string{"recover", "--state-dir", stateDir(t), "--hostname-override", "a", "--proc-root", "-", "--apply"}
	if code := Main(args, nil, &out, &errb); code != exitFailure {
		t.Fatalf("exit %d, want %d", code, exitFailure)
	}
	if !strings.Contains(out.String(), "FAILED: recovery: remove failed: ipvsadm -D -t 198.51.100.2:6443") {
		t.Errorf("stdout does not name the failure:\n%s", out.String())
	}
	for _, bad := range [][]string{{"recover", "--nope"}, {"recover", "-o", "yaml"}, {"recover", "--protected-cidrs", "x"}} {
		errb.Reset()
		if code := Main(bad, nil, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d, usage as in every subcommand (%s)", bad, code, exitUsage, errb.String())
		}
	}
}

func TestRecoverCommandNamesOtherProxy(t *testing.T) {
	useFakeKernel(t, newFakeRecoveryNode())
	root := t.TempDir()
	pid := filepath.Join(root, "4242")
	if err := os.MkdirAll(pid, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(pid, "comm"), []byte("kube-proxy\n"), 0o644)
	_ = os.WriteFile(filepath.Join(pid, "cmdline"), []byte("/usr/local/bin/kube-proxy\x00--config=/var/lib/kube-proxy/config.conf\x00"), 0o644)
	var out, errb bytes.Buffer
	Main([]string{"recover", "--state-dir", stateDir(t), "--proc-root", root}, nil, &out, &errb)
	if !strings.Contains(out.String(), "warning: kube-proxy (pid 4242) is running") {
		t.Errorf("kube-proxy not named:\n%s", out.String())
	}
}

// emptyCluster is an API server that answers every list with nothing:
// another cluster's, or one being rebuilt.
func emptyCluster(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, version := "List", "v1"
		switch {
		case strings.HasSuffix(r.URL.Path, "/nodes"):
			kind = "NodeList"
		case strings.HasSuffix(r.URL.Path, "/services"):
			kind = "ServiceList"
		case strings.HasSuffix(r.URL.Path, "/endpointslices"):
			kind, version = "EndpointSliceList", "discovery.k8s.io/v1"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind": %q, "apiVersion": %q, "metadata": {}, "items": []}`, kind, version)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestRecoverRefusesUntrustedCluster: an API server that answers but does
// not list this node would make every VIP "not wanted": --apply refuses,
// changes nothing and exits 1 unless --force (issue 14, item 11).
func TestRecoverRefusesUntrustedCluster(t *testing.T) {
	n := newFakeRecoveryNode()
	useFakeKernel(t, n)
	base := []string{"recover", "--state-dir", stateDir(t), "--hostname-override", "a", "--proc-root", "-", "--master", emptyCluster(t)}
	var out, errb bytes.Buffer
	if code := Main(append(base, "--apply"), nil, &out, &errb); code != exitFailure {
		t.Fatalf("apply against an empty cluster: exit %d, want %d; stderr %s", code, exitFailure, errb.String())
	}
	if n.link.Mutations+n.table.Mutations != 0 {
		t.Fatalf("apply against an empty cluster changed the node:\n%s%s", n.link, n.table)
	}
	if msg := errb.String(); !strings.Contains(msg, `the API server lists 0 Nodes and not this node "a"`) || !strings.Contains(msg, "nothing changed") {
		t.Errorf("stderr: %q", msg)
	}
	if !strings.Contains(out.String(), "10.96.0.10/32") || !strings.Contains(out.String(), "warning: the API server lists 0 Nodes") {
		t.Errorf("the report does not show what would go and why not:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := Main(append(base, "--apply", "--force"), nil, &out, &errb); code != exitOK {
		t.Fatalf("--force: exit %d, want %d; stderr %s", code, exitOK, errb.String())
	}
	if got := n.link.String(); got != "" {
		t.Errorf("kube-ipvs0 after --force against an empty cluster: %q, want every address gone", got)
	}
}
