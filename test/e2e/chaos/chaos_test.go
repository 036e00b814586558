//go:build !kernel

package chaos

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
)

func TestMain(m *testing.M) { os.Exit(apiserver.RunMain(m)) }

// TestChaos starts the API server on the host and runs TestChaosGuest in
// the VM against it (see the package doc).
func TestChaos(t *testing.T) {
	kills, _ := strconv.Atoi(os.Getenv("CHAOS_KILLS"))
	if kills <= 0 {
		kills = 3
	}
	srv := apiserver.Shared(t)
	dir := t.TempDir()
	guestKC, proxyKC := srv.WriteGuestKubeconfigs(t, dir, srv.Config())
	// Prebuilt binaries (make chaos builds them once) or built here.
	proxyBin := os.Getenv("CHAOS_PROXY_BIN")
	if proxyBin == "" {
		proxyBin = gobuild.Proxy(t, dir)
	}

	timeout := 15*time.Minute + time.Duration(kills)*2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	env := []string{"CHAOS_KUBECONFIG_GUEST=" + guestKC, "CHAOS_KUBECONFIG_PROXY=" + proxyKC, "CHAOS_PROXY_BIN=" + proxyBin,
		"CHAOS_KILLS=" + strconv.Itoa(kills)}
	for _, k := range []string{"CHAOS_SEED", "CHAOS_SERVICES"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestChaosGuest", Bin: os.Getenv("CHAOS_GUEST_BIN"), Timeout: timeout,
		Env: env, Port: srv.Port, AllowSkip: true})
}
