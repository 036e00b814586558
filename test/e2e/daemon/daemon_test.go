//go:build !kernel

package daemon

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
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
	guestKC, proxyKC := srv.WriteGuestKubeconfigs(t, dir, inst.Config)
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestDaemonGuest", Timeout: 15 * time.Minute, Port: srv.Port,
		Env: []string{"DAEMON_KUBECONFIG_ADMIN=" + guestKC, "DAEMON_KUBECONFIG_PROXY=" + proxyKC,
			"DAEMON_PROXY_BIN=" + gobuild.Proxy(t, dir)}})
}
