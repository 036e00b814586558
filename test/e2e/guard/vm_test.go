//go:build !kernel

package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
)

// TestGuardVM starts its own API server on the host and runs
// TestGuardGuest in the test VM against it: `ipvs-proxy run` under an
// address monitor, with hostile Services and Nodes (see the package doc).
func TestGuardVM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srv := apiserver.Start(t)
	dir := t.TempDir()
	// The proxy dials 127.0.0.1:PORT in its node namespace, relayed to
	// the host by the guest test once the startup pass is checked.
	guestKC, proxyKC := srv.WriteGuestKubeconfigs(t, dir, srv.Config())
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestGuardGuest", Timeout: 12 * time.Minute, Port: srv.Port,
		Env: []string{"GUARD_KUBECONFIG_ADMIN=" + guestKC, "GUARD_KUBECONFIG_PROXY=" + proxyKC, "GUARD_PROXY_BIN=" + gobuild.Proxy(t, dir)}})
}
