//go:build !kernel

package daemonbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/consoleprof"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

func TestMain(m *testing.M) { os.Exit(apiserver.RunMain(m)) }

// createAll creates the namespace, the Nodes, and every Service with its
// EndpointSlice, with workers concurrent clients.
func createAll(ctx context.Context, c kubernetes.Interface, services, endpoints, workers int) error {
	if err := createBase(ctx, c); err != nil {
		return err
	}
	return createServices(ctx, c, 0, services, endpoints, workers)
}

// createBase creates the benchmark's namespace, its Nodes and the
// EndpointSlice of default/kubernetes.
func createBase(ctx context.Context, c kubernetes.Interface) error {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for n := 1; n <= 1+otherNodes; n++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n" + strconv.Itoa(n)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP(n).String()}}}}
		if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return createAPIServerSlice(ctx, c)
}

// createAPIServerSlice gives default/kubernetes the EndpointSlice the API
// server's endpoint reconciler would write (the bed runs it with
// --endpoint-reconciler-type=none): one ready endpoint, here node n2's
// address, so the proxy has something to serve for the Service it programs
// first (the report's critical Services row).
func createAPIServerSlice(ctx context.Context, c kubernetes.Interface) error {
	api := guard.APIServerService
	svc, err := c.CoreV1().Services(api.Namespace).Get(ctx, api.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(svc.Spec.Ports) == 0 {
		return errors.New("default/kubernetes has no port")
	}
	sp := svc.Spec.Ports[0]
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: api.Name,
			Labels: map[string]string{discoveryv1.LabelServiceName: api.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{nodeIP(2).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(sp.Name), Protocol: ptr.To(sp.Protocol), Port: ptr.To(sp.TargetPort.IntVal)}},
	}
	_, err = c.DiscoveryV1().EndpointSlices(api.Namespace).Create(ctx, slice, metav1.CreateOptions{})
	return err
}

// createServices creates Services from..to-1, each with its EndpointSlice,
// with workers concurrent clients.
func createServices(ctx context.Context, c kubernetes.Interface, from, to, endpoints, workers int) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if _, err := c.CoreV1().Services(benchNS).Create(ctx, benchService(i), metav1.CreateOptions{}); err != nil {
					errs[w] = fmt.Errorf("service %d: %w", i, err)
					return
				}
				if _, err := c.DiscoveryV1().EndpointSlices(benchNS).Create(ctx, benchSlice(i, endpoints), metav1.CreateOptions{}); err != nil {
					errs[w] = fmt.Errorf("endpointslice %d: %w", i, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestDaemonBench creates the cluster on the host's API server and runs
// TestDaemonBenchGuest in the VM against it (see the package doc). It runs
// only with DAEMONBENCH=1: it takes minutes.
func TestDaemonBench(t *testing.T) {
	if os.Getenv("DAEMONBENCH") != "1" {
		t.Skip("the daemon benchmark runs only when asked: DAEMONBENCH=1 (or `make bench-daemon`): it boots the VM and takes 5 to 15 minutes at 10,000 services")
	}
	services := envInt(t, "DAEMONBENCH_SERVICES", 10000)
	endpoints := envInt(t, "DAEMONBENCH_ENDPOINTS", 10)
	changes := envInt(t, "DAEMONBENCH_CHANGES", 100)
	workers := envInt(t, "DAEMONBENCH_WORKERS", 16)
	memMiB := envInt(t, "DAEMONBENCH_MEM", 4096)
	guestTimeout := envDuration(t, "DAEMONBENCH_TIMEOUT", 80*time.Minute)
	if services > 60000 {
		t.Fatalf("DAEMONBENCH_SERVICES=%d: the Service CIDR is a /16", services)
	}

	ctx, cancel := context.WithTimeout(context.Background(), guestTimeout+20*time.Minute)
	defer cancel()
	// deploy/base's DaemonSet is privileged: the server must allow it.
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{"--allow-privileged=true"}})

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root := filepath.Join(wd, "..", "..", "..")
	proxyBin, guestBin := filepath.Join(dir, "ipvs-proxy"), filepath.Join(dir, "daemonbench.test")
	// The builds run while the objects are created.
	built := make(chan error, 1)
	go func() {
		if err := gobuild.Run(root, "build", "-p", "2", "-o", proxyBin, "./cmd/ipvs-proxy"); err != nil {
			built <- err
			return
		}
		built <- gobuild.Run(wd, "test", "-p", "2", "-vet=off", "-c", "-tags", "kernel", "-o", guestBin, ".")
	}()

	cfg := srv.Config()
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client := kubernetes.NewForConfigOrDie(cfg)
	start := time.Now()
	if err := createAll(ctx, client, services, endpoints, workers); err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	t.Logf("created %d Services and %d EndpointSlices (%d endpoints each) in %v with %d workers (%.0f objects/s)",
		services, services, endpoints, created.Round(time.Millisecond), workers, float64(2*services)/created.Seconds())
	if err := <-built; err != nil {
		t.Fatal(err)
	}

	// The ServiceAccount's token lives an hour: ask for it last.
	inst, err := deploy.Install(ctx, srv, deploy.Base)
	if err != nil {
		t.Fatal(err)
	}
	guestKC, proxyKC := filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	if err := srv.WriteKubeconfig(proxyKC, inst.Config, srv.URL); err != nil {
		t.Fatal(err)
	}

	var console bytes.Buffer
	res, err := vmtest.Run(ctx, vmtest.Config{
		Output: io.MultiWriter(os.Stdout, &console),
		Jobs: []vmtest.Job{{Bin: guestBin, Args: []string{"-test.v", "-test.run", "^TestDaemonBenchGuest$",
			"-test.timeout", guestTimeout.String()}, Dir: wd}},
		Env: []string{"DAEMONBENCH_KUBECONFIG_ADMIN=" + guestKC, "DAEMONBENCH_KUBECONFIG_PROXY=" + proxyKC,
			"DAEMONBENCH_PROXY_BIN=" + proxyBin,
			"DAEMONBENCH_SERVICES=" + strconv.Itoa(services), "DAEMONBENCH_ENDPOINTS=" + strconv.Itoa(endpoints),
			"DAEMONBENCH_CHANGES=" + strconv.Itoa(changes), "DAEMONBENCH_HEAP_PROFILE=" + os.Getenv("DAEMONBENCH_HEAP_PROFILE"),
			"DAEMONBENCH_CPU_PROFILE=" + os.Getenv("DAEMONBENCH_CPU_PROFILE"),
			"DAEMONBENCH_FIRSTCPU_PROFILE=" + os.Getenv("DAEMONBENCH_FIRSTCPU_PROFILE"),
			"DAEMONBENCH_FIRSTCPU_SECONDS=" + os.Getenv("DAEMONBENCH_FIRSTCPU_SECONDS")},
		ForwardPort: srv.Port,
		MemoryMiB:   memMiB,
		Timeout:     guestTimeout + 5*time.Minute,
		FailOnSkip:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM boot %v, total %v", res.Boot, res.Total)
	for _, kind := range []string{"heap", "cpu", "firstcpu"} {
		path := os.Getenv("DAEMONBENCH_" + strings.ToUpper(kind) + "_PROFILE")
		if path == "" {
			continue
		}
		prof, err := consoleprof.Find(console.String(), kind)
		if err == nil {
			err = os.WriteFile(path, prof, 0o644)
		}
		if err != nil {
			t.Fatalf("%s profile: %v", kind, err)
		}
		t.Logf("the proxy's %s profile: %s (go tool pprof -top %s)", kind, path, path)
	}
}
