//go:build !kernel

package daemonbench

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/consoleprof"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// envSizes reads BENCHVS_SIZES: comma-separated Service counts, run in
// ascending order.
func envSizes(t *testing.T) []int {
	t.Helper()
	v := os.Getenv("BENCHVS_SIZES")
	if v == "" {
		v = "1000,3000"
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > 60000 {
			t.Fatalf("BENCHVS_SIZES=%q: want positive Service counts up to 60000 (the Service CIDR is a /16)", v)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestVsKubeProxy runs kube-proxy (IPVS mode) and `ipvs-proxy run` side by
// side against one API server: for each size in BENCHVS_SIZES it adds the
// Services and EndpointSlices the size needs, boots the VM once and runs
// TestVsKubeProxyGuest there (see vskubeproxy_kernel_test.go). It runs only
// with BENCHVS=1 (`make bench-vs-kube-proxy`).
func TestVsKubeProxy(t *testing.T) {
	if os.Getenv("BENCHVS") != "1" {
		t.Skip("the side-by-side benchmark runs only when asked: BENCHVS=1 (or `make bench-vs-kube-proxy`): it boots the VM once per size and takes 10 to 60 minutes per size")
	}
	sizes := envSizes(t)
	endpoints := envInt(t, "DAEMONBENCH_ENDPOINTS", 10)
	workers := envInt(t, "DAEMONBENCH_WORKERS", 16)
	memMiB := envInt(t, "DAEMONBENCH_MEM", 4096)
	budget := envDuration(t, "BENCHVS_BUDGET", 15*time.Minute)
	changeBudget := envDuration(t, "BENCHVS_CHANGE_BUDGET", 10*time.Minute)
	guestTimeout := envDuration(t, "BENCHVS_TIMEOUT", 2*budget+changeBudget+30*time.Minute)

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(wd, "..", "..", "..")
	kpBin, err := kubeproxy.Binary(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(sizes))*(guestTimeout+20*time.Minute))
	defer cancel()
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{"--allow-privileged=true"}})

	dir := t.TempDir()
	proxyBin, guestBin := filepath.Join(dir, "ipvs-proxy"), filepath.Join(dir, "daemonbench.test")
	built := make(chan error, 1)
	go func() {
		if err := gobuild.Run(root, "build", "-p", "2", "-o", proxyBin, "./cmd/ipvs-proxy"); err != nil {
			built <- err
			return
		}
		built <- gobuild.Run(wd, "test", "-p", "2", "-vet=off", "-c", "-tags", "kernel", "-o", guestBin, ".")
	}()

	cfg := srv.Config()
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client := kubernetes.NewForConfigOrDie(cfg)
	if err := createBase(ctx, client); err != nil {
		t.Fatal(err)
	}
	inst, err := deploy.Install(ctx, srv, deploy.Base)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeproxy.Grant(ctx, client); err != nil {
		t.Fatal(err)
	}
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	guestKC := filepath.Join(dir, "admin.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}

	have := 0
	for run, services := range sizes {
		start := time.Now()
		if err := createServices(ctx, client, have, services, endpoints, workers); err != nil {
			t.Fatal(err)
		}
		t.Logf("size %d: created Services %d..%d with their EndpointSlices in %v", services, have, services-1, time.Since(start).Round(time.Millisecond))
		have = services
		// Fresh tokens for every size (apiserver.TokenLifetime).
		proxyCfg, err := srv.ServiceAccountConfig(ctx, inst.ServiceAccount.Namespace, inst.ServiceAccount.Name)
		if err != nil {
			t.Fatal(err)
		}
		kpCfg, err := srv.ServiceAccountConfig(ctx, kubeproxy.ServiceAccountNamespace, kubeproxy.ServiceAccountName)
		if err != nil {
			t.Fatal(err)
		}
		proxyKC, kpKC := filepath.Join(dir, "proxy.kubeconfig"), filepath.Join(dir, "kube-proxy.kubeconfig")
		if err := srv.WriteKubeconfig(proxyKC, proxyCfg, srv.URL); err != nil {
			t.Fatal(err)
		}
		if err := srv.WriteKubeconfig(kpKC, kpCfg, srv.URL); err != nil {
			t.Fatal(err)
		}
		// BENCHVS_MEMORY=DIR: ipvs-proxy's collector trace in the report
		// and its heap profiles saved to DIR/SIZE (consoleprof).
		memDir, memFlag := os.Getenv("BENCHVS_MEMORY"), ""
		var console bytes.Buffer
		out := io.Writer(os.Stdout)
		if memDir != "" {
			memFlag, out = "1", io.MultiWriter(os.Stdout, &console)
		}
		res, err := vmtest.Run(ctx, vmtest.Config{
			Output: out,
			Jobs: []vmtest.Job{{Bin: guestBin, Args: []string{"-test.v", "-test.run", "^TestVsKubeProxyGuest$",
				"-test.timeout", guestTimeout.String()}, Dir: wd}},
			Env: []string{"DAEMONBENCH_KUBECONFIG_ADMIN=" + guestKC, "DAEMONBENCH_KUBECONFIG_PROXY=" + proxyKC,
				"BENCHVS_KUBECONFIG_KUBE_PROXY=" + kpKC, "DAEMONBENCH_PROXY_BIN=" + proxyBin, "KUBE_PROXY_BIN=" + kpBin,
				"DAEMONBENCH_SERVICES=" + strconv.Itoa(services), "DAEMONBENCH_ENDPOINTS=" + strconv.Itoa(endpoints),
				"BENCHVS_RUN=" + strconv.Itoa(run), "BENCHVS_BUDGET=" + budget.String(), "BENCHVS_CHANGE_BUDGET=" + changeBudget.String(),
				"BENCHVS_CHANGES_WALL=" + os.Getenv("BENCHVS_CHANGES_WALL"),
				"BENCHVS_CHANGES=" + os.Getenv("BENCHVS_CHANGES"), "BENCHVS_IDLE=" + os.Getenv("BENCHVS_IDLE"),
				"BENCHVS_PROXIES=" + os.Getenv("BENCHVS_PROXIES"), "BENCHVS_BREAKDOWN=" + os.Getenv("BENCHVS_BREAKDOWN"),
				"BENCHVS_MEMORY=" + memFlag, "BENCHVS_GOGC=" + os.Getenv("BENCHVS_GOGC"),
				"BENCHVS_SERVICE_STATS=" + os.Getenv("BENCHVS_SERVICE_STATS")},
			ForwardPort: srv.Port,
			MemoryMiB:   memMiB,
			Timeout:     guestTimeout + 5*time.Minute,
			FailOnSkip:  true,
		})
		if memDir != "" {
			paths, err := consoleprof.SaveAll(console.String(), filepath.Join(memDir, strconv.Itoa(services)))
			if err != nil {
				t.Errorf("BENCHVS_MEMORY: %v", err)
			}
			t.Logf("ipvs-proxy's heap profiles: %v (go tool pprof -top -sample_index=inuse_space FILE)", paths)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("size %d: VM boot %v, total %v", services, res.Boot, res.Total)
	}
}
