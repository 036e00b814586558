//go:build !kernel

package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// TestClusterVM is the multi-node bed: the API server and Kubernetes'
// controllers on the host, three nodes each running `ipvs-proxy run` and
// a node agent in the VM (TestClusterGuest), and the re-created upstream
// tests on them. It runs when asked (CLUSTER=1, which `make conformance`
// and `make test-conformance` set); CLUSTER_RUN narrows the guest's
// subtests (a -test.run pattern under TestClusterGuest) and CLUSTER_SKIP
// leaves some out (a -test.skip pattern, TestClusterGuest/NAME).
func TestClusterVM(t *testing.T) {
	if os.Getenv("CLUSTER") != "1" {
		t.Skip("the cluster bed runs under `make conformance` (CLUSTER=1): one VM boot, minutes")
	}
	// make conformance (every test) takes about 25 min on a loaded host.
	timeout := 32 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	srv := apiserver.Start(t)
	ctrl, err := cluster.StartControllers(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	sched, err := cluster.StartScheduler(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()

	dir := t.TempDir()
	guestKC, proxyKC := filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	// Each proxy dials 127.0.0.1:PORT in its node namespace, relayed to
	// the host by the guest.
	if err := srv.WriteKubeconfig(proxyKC, srv.Config(), srv.URL); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	proxyBin := os.Getenv("IPVS_PROXY_BIN")
	if proxyBin == "" {
		proxyBin = gobuild.Proxy(t, dir)
	}
	guestBin := gobuild.GuestTest(t, dir, "cluster")

	run := "^TestClusterGuest$"
	if sub := os.Getenv("CLUSTER_RUN"); sub != "" {
		run += "/" + sub
	}
	args := []string{"-test.v", "-test.run", run, "-test.timeout", timeout.String()}
	if skip := os.Getenv("CLUSTER_SKIP"); skip != "" {
		args = append(args, "-test.skip", skip)
	}
	res, err := vmtest.Run(ctx, vmtest.Config{
		Jobs: []vmtest.Job{{Bin: guestBin, Args: args, Dir: wd}},
		Env: []string{"CLUSTER_KUBECONFIG_ADMIN=" + guestKC, "CLUSTER_KUBECONFIG_PROXY=" + proxyKC,
			"CLUSTER_PROXY_BIN=" + proxyBin},
		ForwardPort: srv.Port,
		Timeout:     timeout + 2*time.Minute,
		FailOnSkip:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM boot %v, total %v", res.Boot, res.Total)
}
