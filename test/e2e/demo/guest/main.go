// Command guest is the VM side of `make demo`. It runs as root inside the
// test VM (test/vmtest), builds node-a as a network namespace with
// backend pods, a LAN client and a second node's address (test/ktest),
// writes the seed articles' Services to the host's API server through the
// forwarded port, runs `ipvs-proxy run` in node-a, prints what an operator
// looks at (ipvsadm -Ln, ip addr show kube-ipvs0, the refusal Events), sends
// real requests through ClusterIP, NodePort and externalIPs, and then plays
// the recovery scenario with `ipvs-proxy recover`.
//
// It prints one "==> step" line per step and "ok" or "FAIL: why" after it,
// and exits 1 if any step failed. It owns only the namespaces it creates in
// the VM and the objects it writes to the test API server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

type demo struct {
	t        *tb
	proxyBin string
	// proxyKubeconfig points at relayAddr inside node-a.
	proxyKubeconfig string
	apiAddr         string
	stateDir        string
	logPath         string

	kube kubernetes.Interface
	ctx  context.Context

	node      *ktest.Node
	clientPod *ktest.Pod
	client    *ktest.Client
	nodeB     *ktest.Client

	// stopRelay closes the relay to the API server (startRelay).
	stopRelay func()
	// monitor is `ip -o monitor address` in node-a, writing to monitorOut.
	monitor    *exec.Cmd
	monitorOut *syncBuffer
	proxy      *exec.Cmd
	// proxyDone is closed when the proxy exits; proxyErr is its status.
	proxyDone chan struct{}
	proxyErr  error

	failures []string
	start    time.Time
}

func main() {
	d := &demo{t: &tb{}, start: time.Now()}
	var adminKubeconfig string
	flag.StringVar(&d.proxyBin, "proxy", "", "the ipvs-proxy binary")
	flag.StringVar(&d.proxyKubeconfig, "proxy-kubeconfig", "", "kubeconfig of the ipvs-proxy ServiceAccount, server https://"+relayAddr)
	flag.StringVar(&adminKubeconfig, "admin-kubeconfig", "", "kubeconfig of the admin, for writing the scenarios")
	flag.StringVar(&d.apiAddr, "api", os.Getenv("VMTEST_API_ADDR"), "host:port of the forwarded API server")
	flag.StringVar(&d.stateDir, "state-dir", "/run/ipvs-proxy-demo/state", "--state-dir of the proxy")
	flag.Parse()
	if d.proxyBin == "" || d.proxyKubeconfig == "" || adminKubeconfig == "" || d.apiAddr == "" {
		fmt.Fprintln(os.Stderr, "guest: -proxy, -proxy-kubeconfig, -admin-kubeconfig and -api (or VMTEST_API_ADDR) are required")
		os.Exit(2)
	}
	d.logPath = filepath.Join(filepath.Dir(d.stateDir), "ipvs-proxy.log")
	if err := os.MkdirAll(d.stateDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "guest:", err)
		os.Exit(1)
	}
	var cancel context.CancelFunc
	d.ctx, cancel = context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err == nil {
		d.kube, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "guest: admin client:", err)
		os.Exit(1)
	}

	code := d.run()
	d.t.cleanup()
	os.Exit(code)
}

func (d *demo) run() int {
	defer d.stopProxy()
	ok := d.step("node-a: a network namespace with backend pods, a LAN client and node-b", d.buildNode) &&
		d.step("API server: the Nodes and the seed articles' Services and EndpointSlices", d.writeScenarios) &&
		d.step("ipvs-proxy run on node-a, as ServiceAccount ipvs-proxy/ipvs-proxy (deploy/base RBAC)", d.startProxyAndConverge)
	if ok {
		d.step("ipvsadm -Ln: the virtual servers", d.showIPVS)
		d.step("ip addr show kube-ipvs0: the VIPs, never a node's address", d.showKubeIPVS0)
		d.step("the refusal Events (kubectl get events --field-selector source=ipvs-proxy)", d.showEvents)
		d.step("ipvs-proxy plan for the same objects prints exactly what the kernel holds", d.planEqualsKernel)
		d.step("ClusterIP: wordpress-mysql and zookeeper1's three ports, from a pod", d.requestsClusterIP)
		d.step("sessionAffinity: ClientIP sticks to one backend; without it, round robin", d.requestsAffinity)
		d.step("NodePort 30010 from a client on the LAN", d.requestsNodePort)
		d.step("externalIPs: the node's own address at L4, and a free address bound on kube-ipvs0", d.requestsExternalIP)
		d.step("node-b stays reachable from node-a (its address was refused, not bound)", d.nodeBReachable)
		d.step("a change: mysql-1 terminates, then comes back (partial syncs, graceful termination)", d.changeEndpoints)
		d.step("metrics: curl 127.0.0.1:10249/metrics on node-a", d.showMetrics)
		if d.step("recovery 1/5: stop ipvs-proxy (SIGTERM): the data plane stays and keeps serving", d.stopProxyKeepsDataPlane) &&
			d.step("recovery 2/5: an older proxy binds node-b's address on node-a's kube-ipvs0: node-b is cut off", d.breakNode) &&
			d.step("recovery 3/5: API server unreachable; ipvs-proxy recover (dry run)", d.recoverDryRun) &&
			d.step("recovery 4/5: ipvs-proxy recover --apply", d.recoverApply) {
			d.step("recovery 5/5: node-b reachable again, every service still answers; ipvs-proxy run resumes", d.afterRecovery)
		}
	}
	fmt.Printf("\n==> demo guest finished in %.0fs: ", time.Since(d.start).Seconds())
	if len(d.failures) > 0 {
		fmt.Printf("%d step(s) FAILED:\n", len(d.failures))
		for _, f := range d.failures {
			fmt.Printf("    - %s\n", f)
		}
		d.tailProxyLog(40)
		return 1
	}
	fmt.Println("every step passed")
	return 0
}

// step runs fn as one numbered step and records a failure (an error or a
// ktest Fatal).
func (d *demo) step(title string, fn func() error) (ok bool) {
	fmt.Printf("\n==> %s\n", title)
	start := time.Now()
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				if f, isFatal := r.(fatal); isFatal {
					err = f
					return
				}
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return fn()
	}()
	if err != nil {
		msg := d.named(err.Error())
		fmt.Printf("    FAIL: %s\n", msg)
		d.failures = append(d.failures, title+": "+msg)
		return false
	}
	fmt.Printf("    ok (%.1fs)\n", time.Since(start).Seconds())
	return true
}

// named replaces the network namespace's generated name (ktest's
// node-XXXXXXXX, which request errors carry) with the name the demo shows.
func (d *demo) named(s string) string {
	if d.node == nil {
		return s
	}
	return strings.ReplaceAll(s, d.node.Name, nodeA)
}

// say prints an indented line of commentary.
func say(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

// sh runs a command in node-a and prints it the way an operator types it,
// with its output indented.
func (d *demo) sh(name string, args ...string) (string, error) {
	fmt.Printf("    node-a# %s %s\n", name, strings.Join(args, " "))
	out, err := d.node.Exec(name, args...)
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if l != "" {
			fmt.Printf("      %s\n", l)
		}
	}
	return out, err
}

// waitFor polls fn until it returns nil or a permanent error, or timeout
// passes.
func waitFor(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
