// Command demo is `make demo`: the whole proxy on a real kernel against a
// real API server, in a few minutes, from a fresh machine.
//
// On the host it starts the in-process kube-apiserver (test/e2e/bed/apiserver),
// applies deploy/base to it (test/e2e/bed/deploy.Install: the ServiceAccount
// ipvs-proxy/ipvs-proxy with its ClusterRole and the events Lease's Role),
// and writes two kubeconfig files: the proxy's
// (that ServiceAccount's token, for the relay inside node-a) and the admin's
// (for the guest to write the scenarios). It then boots the test VM
// (test/vmtest) with the API server's port forwarded and runs the guest
// program (test/e2e/demo/guest), which builds node-a, applies the seed
// articles' scenarios, runs `ipvs-proxy run` and `ipvs-proxy recover`, and
// prints what an operator looks at. The guest's console is streamed as it
// goes.
//
// It exits 0 only when every step in the guest passed; it removes the API
// server's data and its own temporary files, and the VM leaves nothing
// behind. It touches nothing outside loopback, the VM and its temporary
// directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

func main() {
	var (
		proxyBin = flag.String("proxy", "bin/ipvs-proxy", "the ipvs-proxy binary (make build)")
		guestBin = flag.String("guest", "bin/demo-guest", "the guest program (go build ./demo/guest in test/e2e)")
		base     = flag.String("deploy", "deploy/base", "the kustomization applied to the API server: the proxy runs as its DaemonSet's ServiceAccount")
		timeout  = flag.Duration("timeout", 12*time.Minute, "bound for the whole demo")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	err := run(ctx, *proxyBin, *guestBin, *base)
	fmt.Printf("\n[demo] total %.0fs\n", time.Since(start).Seconds())
	if err != nil {
		fmt.Fprintf(os.Stderr, "[demo] FAIL: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("[demo] PASS: every scenario worked")
}

func progress(format string, args ...any) {
	fmt.Printf("[demo] "+format+"\n", args...)
}

func run(ctx context.Context, proxyBin, guestBin, basePath string) error {
	for _, p := range []*string{&proxyBin, &guestBin, &basePath} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("%w (run `make demo`, which builds it)", err)
		}
		*p = abs
	}
	if _, err := vmtest.FindKernelRoot(); err != nil {
		return fmt.Errorf("%w (scripts/install-deps.sh unpacks it; `make demo` runs it)", err)
	}

	progress("starting kube-apiserver and etcd in-process on 127.0.0.1")
	t0 := time.Now()
	srv, err := apiserver.New(apiserver.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	progress("API server up at %s in %.1fs; the VM reaches it at %s", srv.URL, time.Since(t0).Seconds(), srv.GuestURL())

	admin, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		return err
	}
	// What `kubectl apply --server-side -k deploy/base` applies (the
	// DaemonSet stays without pods: there is no controller-manager).
	inst, err := deploy.Install(ctx, srv, basePath)
	if err != nil {
		return err
	}
	saCfg := inst.Config
	progress("%s applied; the proxy runs as its ServiceAccount %s, with exactly the RBAC it binds", basePath, inst.ServiceAccount)

	dir, err := os.MkdirTemp("", "ipvs-proxy-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	proxyKubeconfig := filepath.Join(dir, "proxy.kubeconfig")
	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	// The proxy runs in node-a, which reaches the API server through a relay
	// on its own loopback; the certificate is valid for 127.0.0.1.
	if err := srv.WriteKubeconfig(proxyKubeconfig, saCfg, "https://127.0.0.1:6443"); err != nil {
		return err
	}
	if err := srv.WriteKubeconfig(adminKubeconfig, srv.Config(), srv.GuestURL()); err != nil {
		return err
	}

	progress("booting the VM (Debian kernel under qemu TCG) with port %d forwarded; the guest takes it from here", srv.Port)
	res, err := vmtest.Run(ctx, vmtest.Config{
		Jobs: []vmtest.Job{{
			Bin: guestBin,
			Args: []string{
				"-proxy", proxyBin,
				"-proxy-kubeconfig", proxyKubeconfig,
				"-admin-kubeconfig", adminKubeconfig,
			},
			Dir: dir,
		}},
		ForwardPort: srv.Port,
		Output:      os.Stdout,
		Timeout:     10 * time.Minute,
	})
	if res != nil {
		progress("VM: boot %.1fs, total %.1fs", res.Boot.Seconds(), res.Total.Seconds())
	}
	if err != nil {
		return err
	}
	return checkFromHost(ctx, admin)
}

// checkFromHost confirms from the host what the guest reported: the
// refusal Events exist in the API server, written by the proxy on node-a.
func checkFromHost(ctx context.Context, c kubernetes.Interface) error {
	evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "source=ipvs-proxy"})
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	var found []string
	seen := map[string]int{}
	for _, e := range evs.Items {
		found = append(found, fmt.Sprintf("%s %s %s/%s (host %s)", e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Source.Host))
		seen[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+" "+e.Reason+": "+e.Message]++
	}
	if len(found) == 0 {
		return errors.New("the API server holds no Event from ipvs-proxy")
	}
	progress("the API server holds %d Event(s) from ipvs-proxy: %s", len(found), strings.Join(found, "; "))
	// One Event per refusal, across the proxy's restart too: the restarted
	// process reads what the first reported from --state-dir.
	for what, n := range seen {
		if n > 1 {
			return fmt.Errorf("%d Events for one refusal (%s): the restarted proxy reported it again", n, what)
		}
	}
	return nil
}
