//go:build !kernel

package daemonsoak

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/consoleprof"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
)

// TestDaemonSoak starts the API server on the host and runs
// TestDaemonSoakGuest in the VM against it (see the package doc). It runs
// only with DSOAK=1 (`make daemon-soak`).
func TestDaemonSoak(t *testing.T) {
	if os.Getenv("DSOAK") == "" {
		t.Skip("the daemon soak runs with DSOAK=1: make daemon-soak")
	}
	duration, err := time.ParseDuration(cmp.Or(os.Getenv("DSOAK_DURATION"), "3m"))
	if err != nil {
		t.Fatal(err)
	}
	srv := apiserver.Shared(t)
	dir := t.TempDir()
	guestKC, proxyKC := srv.WriteGuestKubeconfigs(t, dir, srv.Config())
	proxyBin := os.Getenv("CHAOS_PROXY_BIN")
	if proxyBin == "" {
		proxyBin = gobuild.Proxy(t, dir)
	}
	// Creating the objects and the first full sync take minutes at 10,000
	// services under TCG, and each check pauses the churn for a
	// convergence: at most 10 min, plus the comparison under way then
	// (reading 10,000 Services and their slices, planning them and reading
	// the kernel take minutes there too).
	every, err := time.ParseDuration(cmp.Or(os.Getenv("DSOAK_CHECK"), "1m"))
	if err != nil {
		t.Fatalf("DSOAK_CHECK: %v", err)
	}
	if every <= 0 {
		t.Fatalf("DSOAK_CHECK %v: must be positive", every)
	}
	checks := int(duration/every) + 2
	timeout := 30*time.Minute + duration + time.Duration(checks)*15*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	env := []string{"CHAOS_KUBECONFIG_GUEST=" + guestKC, "CHAOS_KUBECONFIG_PROXY=" + proxyKC, "CHAOS_PROXY_BIN=" + proxyBin,
		"DSOAK_DURATION=" + duration.String(), "DSOAK_CHECK=" + every.String()}
	for _, k := range []string{"DSOAK_SERVICES", "DSOAK_ENDPOINTS", "DSOAK_SEED"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	// DSOAK_PROFILES is a directory for the proxy's heap profile at every
	// check (heap-check-N.pprof), carried out through the console.
	profiles := os.Getenv("DSOAK_PROFILES")
	var console bytes.Buffer
	suite := guest.Suite{Test: "TestDaemonSoakGuest", Bin: os.Getenv("CHAOS_GUEST_BIN"), Timeout: timeout,
		Env: env, Port: srv.Port}
	if profiles != "" {
		suite.Env = append(suite.Env, "DSOAK_PROFILES=1")
		suite.Output = &console
		// The profiles are saved even when the soak fails: they are what
		// explains a finding about memory.
		defer func() {
			paths, err := consoleprof.SaveAll(console.String(), profiles)
			if err != nil {
				t.Errorf("DSOAK_PROFILES: %v", err)
			}
			t.Logf("the proxy's heap profiles: %v (go tool pprof -top -sample_index=inuse_space FILE)", paths)
		}()
	}
	guest.Run(ctx, t, dir, suite)
}
