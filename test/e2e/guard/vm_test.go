//go:build !kernel

package guard_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// TestGuardVM starts its own API server on the host and runs
// TestGuardGuest in the test VM against it: `ipvs-proxy run` under an
// address monitor, with hostile Services and Nodes (see the package doc).
func TestGuardVM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srv := apiserver.Start(t)
	dir := t.TempDir()
	guestKC, proxyKC := filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	// The proxy dials 127.0.0.1:PORT in its node namespace, relayed to
	// the host by the guest test once the startup pass is checked.
	if err := srv.WriteKubeconfig(proxyKC, srv.Config(), srv.URL); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	proxyBin, guestBin := gobuild.Proxy(t, dir), gobuild.GuestTest(t, dir, "guard")

	timeout := 12 * time.Minute
	res, err := vmtest.Run(ctx, vmtest.Config{
		Jobs: []vmtest.Job{{Bin: guestBin, Args: []string{"-test.v", "-test.run", "^TestGuardGuest$",
			"-test.timeout", timeout.String()}, Dir: wd}},
		Env:         []string{"GUARD_KUBECONFIG_ADMIN=" + guestKC, "GUARD_KUBECONFIG_PROXY=" + proxyKC, "GUARD_PROXY_BIN=" + proxyBin},
		ForwardPort: srv.Port,
		Timeout:     timeout + 2*time.Minute,
		FailOnSkip:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM boot %v, total %v", res.Boot, res.Total)
}
