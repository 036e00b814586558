//go:build !kernel

package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
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
	guestKC, proxyKC := filepath.Join(dir, "guest.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	if err := srv.WriteKubeconfig(proxyKC, srv.Config(), srv.URL); err != nil {
		t.Fatal(err)
	}

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// Prebuilt binaries (make chaos builds them once) or built here.
	proxyBin, guestBin := os.Getenv("CHAOS_PROXY_BIN"), os.Getenv("CHAOS_GUEST_BIN")
	if proxyBin == "" {
		proxyBin = gobuild.Proxy(t, dir)
	}
	if guestBin == "" {
		guestBin = gobuild.GuestTest(t, dir, "chaos")
	}

	timeout := 15*time.Minute + time.Duration(kills)*2*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env := []string{"CHAOS_KUBECONFIG_GUEST=" + guestKC, "CHAOS_KUBECONFIG_PROXY=" + proxyKC, "CHAOS_PROXY_BIN=" + proxyBin,
		"CHAOS_KILLS=" + strconv.Itoa(kills)}
	for _, k := range []string{"CHAOS_SEED", "CHAOS_SERVICES"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	res, err := vmtest.Run(ctx, vmtest.Config{
		Jobs:        []vmtest.Job{{Bin: guestBin, Args: []string{"-test.v", "-test.run", "^TestChaosGuest$", "-test.timeout", timeout.String()}, Dir: wd}},
		Env:         env,
		ForwardPort: srv.Port,
		Timeout:     timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM boot %v, total %v", res.Boot, res.Total)
}
