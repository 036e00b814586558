//go:build kernel

package kubeproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// TestStartupCleanupGuest is the VM half of TestStartupCleanup: kube-proxy
// in nftables mode starts in a node namespace holding a virtual server
// and kube-ipvs0 with a VIP, with kubeadm's /lib/modules and with an empty
// one (Options.NoModules). No API server answers: the cleanup runs before
// kube-proxy reads anything, and its first failed list of the Node says
// the cleanup is over.
func TestStartupCleanupGuest(t *testing.T) {
	bin := vmtest.GuestEnv(t, "KUBE_PROXY_BIN")
	for _, tc := range []struct {
		name      string
		noModules bool
		// flushed: the virtual server and kube-ipvs0 are gone afterwards.
		flushed bool
	}{
		{"lib-modules", false, true},
		{"empty /lib/modules", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := ktest.NewNode(t)
			node.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
			node.Run(t, "ip", "addr", "add", "10.96.0.10/32", "dev", "kube-ipvs0")
			node.Run(t, "ipvsadm", "-A", "-t", "10.96.0.10:80", "-s", "rr")
			dir := t.TempDir()
			kc := filepath.Join(dir, "kubeconfig")
			// Nothing listens on port 1: every request is refused at once.
			if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, "config.conf")
			if err := (Config{Kubeconfig: kc, ClusterCIDR: "10.244.0.0/16", Mode: "nftables"}).WriteFile(cfg); err != nil {
				t.Fatal(err)
			}
			p := Start(t, node.NS, Options{Bin: bin, NodeName: "node-a", ConfigFile: cfg, NoModules: tc.noModules})
			deadline := time.Now().Add(2 * time.Minute)
			for !p.OutputHas("connection refused") {
				if time.Now().After(deadline) || !p.Alive() {
					t.Fatalf("kube-proxy never tried the API server (alive %v):\n%s", p.Alive(), p.Tail(40))
				}
				time.Sleep(200 * time.Millisecond)
			}
			ipvs, _ := node.Exec("ipvsadm", "-S", "-n")
			link, linkErr := node.Exec("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
			kept := strings.Contains(ipvs, "10.96.0.10:80") && linkErr == nil && strings.Contains(link, "10.96.0.10/32")
			t.Logf("after kube-proxy's start-up cleanup: ipvsadm -S -n %q; kube-ipvs0 %q %v", ipvs, link, linkErr)
			if kept == tc.flushed {
				t.Errorf("virtual server and kube-ipvs0 kept: %v, want %v (kube-proxy's log:\n%s)", kept, !tc.flushed, p.Tail(40))
			}
		})
	}
}
