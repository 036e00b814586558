//go:build !kernel

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

func TestMain(m *testing.M) { os.Exit(apiserver.RunMain(m)) }

// TestDaemon starts the API server on the host and runs TestDaemonGuest in
// the VM against it (see the package doc).
func TestDaemon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	// deploy/base's DaemonSet is privileged: the server must allow it.
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{"--allow-privileged=true"}})
	inst, err := deploy.Install(ctx, srv, deploy.Base)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	guestKC, proxyKC := filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	if err := srv.WriteKubeconfig(proxyKC, inst.Config, srv.URL); err != nil {
		t.Fatal(err)
	}

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	proxyBin, guestBin := gobuild.Proxy(t, dir), gobuild.GuestTest(t, dir, "daemon")

	timeout := 15 * time.Minute
	res, err := vmtest.Run(ctx, vmtest.Config{
		Jobs: []vmtest.Job{{Bin: guestBin, Args: []string{"-test.v", "-test.run", "^TestDaemonGuest$",
			"-test.timeout", timeout.String()}, Dir: wd}},
		Env: []string{"DAEMON_KUBECONFIG_ADMIN=" + guestKC, "DAEMON_KUBECONFIG_PROXY=" + proxyKC,
			"DAEMON_PROXY_BIN=" + proxyBin},
		ForwardPort: srv.Port,
		Timeout:     timeout + 2*time.Minute,
		FailOnSkip:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM boot %v, total %v", res.Boot, res.Total)
}
