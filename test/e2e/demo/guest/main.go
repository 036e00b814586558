// Command guest is the VM side of `make demo`. It runs as root inside the
// test VM (internal/vmtest), builds node-a as a network namespace with
// backend pods, a LAN client and a second node's address (internal/ktest),
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
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/internal/ktest"
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

	relay *relay
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

// relayAddr is where ipvs-proxy finds the API server from inside node-a:
// a relay to the forwarded port (the node namespace has no route out).
// The serving certificate is valid for 127.0.0.1.
const relayAddr = "127.0.0.1:6443"

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
		fmt.Printf("    FAIL: %v\n", err)
		d.failures = append(d.failures, title+": "+err.Error())
		return false
	}
	fmt.Printf("    ok (%.1fs)\n", time.Since(start).Seconds())
	return true
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

func (d *demo) buildNode() error {
	d.node = ktest.NewNode(d.t)
	for _, b := range backends {
		p := d.node.AddPod(d.t, b.name, b.addr)
		for _, port := range b.ports {
			p.Listen(d.t, ktest.TCP, port)
		}
	}
	d.clientPod = d.node.AddPod(d.t, "client-pod", clientPodIP)
	d.client = d.node.AddClient(d.t, "client", clientIP)
	d.nodeB = d.node.AddClient(d.t, nodeB, nodeBIP)
	if err := d.listenNodeB(); err != nil {
		return err
	}
	say("node-a   eth0 %s (a bridge: the node's LAN), pods 10.244.1.x on veths, --cluster-cidr %s", nodeAIP, podCIDR)
	for _, b := range backends {
		ports := []string{"8080"}
		for _, p := range b.ports {
			ports = append(ports, fmt.Sprint(p))
		}
		say("  pod %-13s %-11s answers \"%s <peer address>\" on tcp %s", b.name, b.addr, b.name, strings.Join(ports, ","))
	}
	say("  pod %-13s %-11s sends requests to ClusterIPs", "client-pod", clientPodIP)
	say("client   %s on the LAN: NodePort and externalIP traffic", clientIP)
	say("node-b   %s on the LAN: another node, its kubelet port %d answers \"node-b-kubelet <peer>\"", nodeBIP, kubelet)
	return nil
}

// listenNodeB serves node-b's "kubelet": one line naming it and the peer.
func (d *demo) listenNodeB() error {
	var l net.Listener
	err := d.nodeB.Do(func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", kubelet))
		return err
	})
	if err != nil {
		return fmt.Errorf("node-b: listen :%d: %w", kubelet, err)
	}
	d.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			fmt.Fprintf(c, "node-b-kubelet %s\n", peer)
			c.Close()
		}
	}()
	return nil
}

func (d *demo) writeScenarios() error {
	ctx := d.ctx
	for _, n := range []*corev1.Node{node(nodeA, nodeAIP), node(nodeB, nodeBIP)} {
		if _, err := d.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		say("node/%s  InternalIP %s", n.Name, n.Status.Addresses[0].Address)
	}
	for _, s := range scenarios() {
		if s.svc.Namespace != "default" {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.svc.Namespace}}
			if _, err := d.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create namespace %s: %w", ns.Name, err)
			}
		}
		svc, err := d.kube.CoreV1().Services(s.svc.Namespace).Create(ctx, s.svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create service %s/%s: %w", s.svc.Namespace, s.svc.Name, err)
		}
		if _, err := d.kube.DiscoveryV1().EndpointSlices(s.slice.Namespace).Create(ctx, s.slice, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create endpointslice %s/%s: %w", s.slice.Namespace, s.slice.Name, err)
		}
		s.svc = svc
		say("%s", s.seed)
		say("  service/%s", describe(s))
	}
	return nil
}

// startProxyAndConverge starts the relay and `ipvs-proxy run`, and waits
// until the kernel holds what the scenarios need.
func (d *demo) startProxyAndConverge() error {
	if err := d.startRelay(); err != nil {
		return err
	}
	if err := d.startProxy(); err != nil {
		return err
	}
	want := []string{
		"-A -t " + mysqlVIP + ":3306 -s rr",
		"-a -t " + mysqlVIP + ":3306 -r 10.244.1.2:3306 -m -w 1",
		"-a -t " + mysqlVIP + ":3306 -r 10.244.1.3:3306 -m -w 1",
		"-A -t " + nodeAIP + ":30010 -s rr",
		"-A -t " + zkVIP + ":2181 -s rr", "-A -t " + zkVIP + ":2888 -s rr", "-A -t " + zkVIP + ":3888 -s rr",
		"-A -t " + stickVIP + ":80 -s rr -p 600",
		"-A -t " + freeExtIP + ":80 -s rr",
		"-A -t " + nodeAIP + ":80 -s rr",
	}
	start := time.Now()
	err := waitFor(180*time.Second, func() error {
		if d.proxyExited() {
			return permanent{fmt.Errorf("ipvs-proxy run exited: %v", d.proxyErr)}
		}
		out, err := d.node.Exec("ipvsadm", "-S", "-n")
		if err != nil {
			return err
		}
		for _, w := range want {
			if !strings.Contains(out, w+"\n") && !strings.HasSuffix(out, w) {
				return fmt.Errorf("the kernel lacks %q", w)
			}
		}
		// Addresses are bound last, once their virtual servers exist.
		out, err = d.node.Exec("ip", "-4", "-o", "addr", "show", "dev", "kube-ipvs0")
		if err != nil {
			return err
		}
		for _, vip := range []string{mysqlVIP, zkVIP, stickVIP, nginxVIP, freeExtIP} {
			if !strings.Contains(out, "inet "+vip+"/32") {
				return fmt.Errorf("%s is not bound on kube-ipvs0 yet", vip)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	say("the kernel holds every scenario's virtual servers and VIPs %.1fs after start (qemu TCG: no KVM)", time.Since(start).Seconds())
	say("from the proxy's log (--log-format console --log-level debug):")
	for _, l := range d.grepProxyLog(8, "informer caches synced", "sync done", "sync applied", "sync failed", "refused to bind") {
		say("  %s", l)
	}
	return d.startMonitor()
}

// startMonitor records every address change on node-a (`ip -o monitor
// address`) until checkMonitor: a proxy that adopts and repairs must never
// flap a VIP.
func (d *demo) startMonitor() error {
	cmd := exec.Command("ip", "netns", "exec", d.node.Name, "ip", "-o", "monitor", "address")
	d.monitorOut = &syncBuffer{}
	cmd.Stdout = d.monitorOut
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ip monitor: %w", err)
	}
	d.monitor = cmd
	d.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return nil
}

// checkMonitor stops the monitor and fails on any change to kube-ipvs0.
func (d *demo) checkMonitor() error {
	if d.monitor == nil {
		return errors.New("no address monitor running")
	}
	time.Sleep(500 * time.Millisecond)
	d.monitor.Process.Kill()
	d.monitor.Wait()
	d.monitor = nil
	var changes []string
	for _, l := range strings.Split(d.monitorOut.String(), "\n") {
		if strings.Contains(l, "kube-ipvs0") {
			changes = append(changes, strings.Join(strings.Fields(l), " "))
		}
	}
	say("ip -o monitor address on node-a since it started: %d change(s) on kube-ipvs0", len(changes))
	for _, c := range changes {
		say("  %s", c)
	}
	if len(changes) > 0 {
		return errors.New("kube-ipvs0 flapped: addresses changed although no Service did")
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// permanent makes waitFor stop polling.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }

// proxyArgs are the flags of `ipvs-proxy run` on node-a.
func (d *demo) proxyArgs() []string {
	return []string{"run",
		"--kubeconfig", d.proxyKubeconfig,
		"--hostname-override", nodeA,
		"--cluster-cidr", podCIDR,
		"--state-dir", d.stateDir,
		"--sync-period", "15s",
		"--healthz-bind-address", "127.0.0.1:10256",
		"--metrics-bind-address", "127.0.0.1:10249",
		"--log-format", "console",
		"--log-level", "debug",
	}
}

func (d *demo) startProxy() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := append([]string{"netns", "exec", d.node.Name, d.proxyBin}, d.proxyArgs()...)
	say("node-a# ipvs-proxy %s", strings.Join(d.proxyArgs(), " "))
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start ipvs-proxy: %w", err)
	}
	d.proxy, d.proxyDone, d.proxyErr = cmd, make(chan struct{}), nil
	done := d.proxyDone
	go func() {
		err := cmd.Wait()
		logf.Close()
		d.proxyErr = err
		close(done)
	}()
	return nil
}

func (d *demo) proxyExited() bool {
	if d.proxyDone == nil {
		return true
	}
	select {
	case <-d.proxyDone:
		return true
	default:
		return false
	}
}

// stopProxy sends SIGTERM and waits for the exit; it returns the exit error.
func (d *demo) stopProxy() error {
	if d.proxy == nil || d.proxyExited() {
		return nil
	}
	d.proxy.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.proxyDone:
		return d.proxyErr
	case <-time.After(20 * time.Second):
		d.proxy.Process.Kill()
		<-d.proxyDone
		return errors.New("ipvs-proxy did not exit within 20s of SIGTERM")
	}
}

func (d *demo) tailProxyLog(n int) {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Printf("\n==> last %d lines of the ipvs-proxy log\n", len(lines))
	for _, l := range lines {
		fmt.Printf("    %s\n", l)
	}
}

// grepProxyLog prints the proxy's log lines that contain any of subs.
func (d *demo) grepProxyLog(max int, subs ...string) []string {
	f, err := os.Open(d.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, s := range subs {
			if strings.Contains(sc.Text(), s) {
				out = append(out, sc.Text())
				break
			}
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

func (d *demo) showIPVS() error {
	out, err := d.sh("ipvsadm", "-Ln")
	if err != nil {
		return err
	}
	if strings.Contains(out, nodeBIP) {
		return fmt.Errorf("a virtual server on node-b's address %s", nodeBIP)
	}
	return nil
}

func (d *demo) showKubeIPVS0() error {
	if _, err := d.sh("ip", "addr", "show", "kube-ipvs0"); err != nil {
		return err
	}
	out, err := d.node.Exec("ip", "-4", "-o", "addr", "show", "dev", "kube-ipvs0")
	if err != nil {
		return err
	}
	for _, vip := range []string{mysqlVIP, zkVIP, stickVIP, nginxVIP, freeExtIP} {
		if !strings.Contains(out, "inet "+vip+"/32") {
			return fmt.Errorf("%s is not bound on kube-ipvs0", vip)
		}
	}
	for _, a := range []string{nodeAIP, nodeBIP} {
		if strings.Contains(out, "inet "+a+"/") {
			return fmt.Errorf("the node address %s is bound on kube-ipvs0", a)
		}
	}
	say("%s (node-a) and %s (node-b) are not there: the guard refused them", nodeAIP, nodeBIP)
	return nil
}

func (d *demo) showEvents() error {
	want := map[string]bool{"default/nginx-service": false, "default/nginx-other": false}
	var evs []corev1.Event
	err := waitFor(30*time.Second, func() error {
		list, err := d.kube.CoreV1().Events("").List(d.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		evs = evs[:0]
		for _, e := range list.Items {
			if e.Source.Component != "ipvs-proxy" {
				continue
			}
			evs = append(evs, e)
			k := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
			if _, ok := want[k]; ok && e.Type == corev1.EventTypeWarning {
				want[k] = true
			}
		}
		for k, seen := range want {
			if !seen {
				return fmt.Errorf("no Warning Event on service %s", k)
			}
		}
		return nil
	})
	slices.SortFunc(evs, func(a, b corev1.Event) int { return strings.Compare(a.InvolvedObject.Name, b.InvolvedObject.Name) })
	fmt.Printf("    $ kubectl get events -A --field-selector source=ipvs-proxy\n")
	fmt.Printf("      %-8s %-8s %-8s %-28s %s\n", "TYPE", "REASON", "SOURCE", "OBJECT", "MESSAGE")
	for _, e := range evs {
		fmt.Printf("      %-8s %-8s %-8s %-28s %s\n", e.Type, e.Reason, e.Source.Host,
			strings.ToLower(e.InvolvedObject.Kind)+"/"+e.InvolvedObject.Name, e.Message)
	}
	return err
}

// hits sends n TCP requests from ns and counts answers by backend name.
func hits(ns *ktest.NS, addr string, n int) (map[string]int, []string, error) {
	counts := map[string]int{}
	var answers []string
	for range n {
		out, err := ns.Request(ktest.TCP, addr)
		if err != nil {
			return counts, answers, err
		}
		answers = append(answers, out)
		name, _, _ := strings.Cut(out, " ")
		counts[name]++
	}
	return counts, answers, nil
}

// ask sends n requests from ns (named who) to addr, prints the answers and
// checks they came from exactly the backends in want.
func ask(who string, ns *ktest.NS, addr string, n int, want ...string) error {
	counts, answers, err := hits(ns, addr, n)
	fmt.Printf("    %s$ request tcp %s  x%d\n", who, addr, n)
	for _, a := range answers {
		fmt.Printf("      %s\n", a)
	}
	if err != nil {
		return err
	}
	var got []string
	for name := range counts {
		got = append(got, name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s answered by %v, want %v", addr, got, want)
	}
	return nil
}

func (d *demo) requestsClusterIP() error {
	if err := ask("client-pod", d.clientPod.NS, mysqlVIP+":3306", 4, "mysql-0", "mysql-1"); err != nil {
		return err
	}
	for _, port := range []string{"2181", "2888", "3888"} {
		if err := ask("client-pod", d.clientPod.NS, zkVIP+":"+port, 1, "zookeeper1-0"); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) requestsAffinity() error {
	counts, _, err := hits(d.clientPod.NS, stickVIP+":80", 6)
	fmt.Printf("    client-pod$ request tcp %s:80  x6   (sticky-web, ClientIP)  -> %v\n", stickVIP, counts)
	if err != nil {
		return err
	}
	if len(counts) != 1 {
		return fmt.Errorf("ClientIP affinity: answers from %d backends, want 1", len(counts))
	}
	counts, _, err = hits(d.clientPod.NS, nginxVIP+":80", 6)
	fmt.Printf("    client-pod$ request tcp %s:80  x6  (nginx-service, no affinity) -> %v\n", nginxVIP, counts)
	if err != nil {
		return err
	}
	if len(counts) != 2 {
		return fmt.Errorf("round robin: answers from %d backends, want 2", len(counts))
	}
	return nil
}

func (d *demo) requestsNodePort() error {
	return ask("client", d.client.NS, nodeAIP+":30010", 4, "mysql-0", "mysql-1")
}

func (d *demo) requestsExternalIP() error {
	if err := ask("client", d.client.NS, nodeAIP+":80", 2, "nginx-0", "nginx-1"); err != nil {
		return err
	}
	return ask("client", d.client.NS, freeExtIP+":80", 2, "nginx-0", "nginx-1")
}

func (d *demo) nodeBReachable() error {
	out, err := d.node.Request(ktest.TCP, fmt.Sprintf("%s:%d", nodeBIP, kubelet))
	fmt.Printf("    node-a$ request tcp %s:%d\n", nodeBIP, kubelet)
	if err != nil {
		return err
	}
	fmt.Printf("      %s\n", out)
	if !strings.HasPrefix(out, "node-b-kubelet ") {
		return fmt.Errorf("answered by %q, not node-b", out)
	}
	return nil
}

// httpGet fetches path from addr inside node-a (the socket is made there).
func (d *demo) httpGet(addr, path string) (string, error) {
	var body []byte
	err := d.node.Do(func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
		body, err = io.ReadAll(c)
		return err
	})
	return string(body), err
}

func (d *demo) showMetrics() error {
	body, err := d.httpGet("127.0.0.1:10249", "/metrics")
	if err != nil {
		return err
	}
	fmt.Printf("    node-a# curl -s 127.0.0.1:10249/metrics | grep ^ipvs_proxy_ | grep -v _bucket\n")
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "ipvs_proxy_") && !strings.Contains(l, "_bucket") {
			fmt.Printf("      %s\n", l)
			n++
		}
	}
	if n == 0 {
		return errors.New("no ipvs_proxy_ metrics")
	}
	hz, err := d.httpGet("127.0.0.1:10256", "/healthz")
	if err != nil {
		return err
	}
	status, _, _ := strings.Cut(hz, "\r\n")
	fmt.Printf("    node-a# curl -si 127.0.0.1:10256/healthz | head -1\n      %s\n", status)
	if !strings.Contains(status, " 200") {
		return fmt.Errorf("/healthz: %s", status)
	}
	return nil
}

// setMySQL1 marks mysql-1 in wordpress-mysql's EndpointSlice ready or
// terminating (not serving), stamping the trigger time as the EndpointSlice
// controller does, and returns when the kernel shows want for it.
func (d *demo) setMySQL1(ready bool, want string) (time.Duration, error) {
	api := d.kube.DiscoveryV1().EndpointSlices("default")
	s, err := api.Get(d.ctx, "wordpress-mysql-demo", metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	for i := range s.Endpoints {
		if s.Endpoints[i].TargetRef.Name == "mysql-1" {
			s.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(!ready)}
		}
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	start := time.Now()
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = start.UTC().Format(time.RFC3339Nano)
	if _, err := api.Update(d.ctx, s, metav1.UpdateOptions{}); err != nil {
		return 0, err
	}
	err = waitFor(30*time.Second, func() error {
		out, err := d.node.Exec("ipvsadm", "-S", "-n")
		if err != nil {
			return err
		}
		if !strings.Contains(out, want+"\n") {
			return fmt.Errorf("the kernel lacks %q", want)
		}
		return nil
	})
	return time.Since(start), err
}

func (d *demo) changeEndpoints() error {
	say("kubectl: EndpointSlice wordpress-mysql-demo, mysql-1 -> ready=false serving=false terminating=true")
	took, err := d.setMySQL1(false, "-a -t "+mysqlVIP+":3306 -r 10.244.1.3:3306 -m -w 0")
	if err != nil {
		return err
	}
	say("in the kernel %.2fs later (API server -> watch -> plan -> partial apply, under TCG):", took.Seconds())
	if _, err := d.sh("ipvsadm", "-Ln", "-t", mysqlVIP+":3306"); err != nil {
		return err
	}
	say("mysql-1 is quiesced at weight 0 (TCP: existing connections finish, no new ones), not deleted")
	if err := ask("client-pod", d.clientPod.NS, mysqlVIP+":3306", 3, "mysql-0"); err != nil {
		return err
	}
	say("kubectl: mysql-1 -> ready=true again")
	took, err = d.setMySQL1(true, "-a -t "+mysqlVIP+":3306 -r 10.244.1.3:3306 -m -w 1")
	if err != nil {
		return err
	}
	say("weight 1 again %.2fs later", took.Seconds())
	return ask("client-pod", d.clientPod.NS, mysqlVIP+":3306", 2, "mysql-0", "mysql-1")
}

func (d *demo) stopProxyKeepsDataPlane() error {
	if err := d.stopProxy(); err != nil {
		return fmt.Errorf("ipvs-proxy exit: %w", err)
	}
	for _, l := range d.grepProxyLog(2, "sync loop stopped") {
		say("log: %s", l)
	}
	out, err := d.node.Exec("ipvsadm", "-S", "-n")
	if err != nil {
		return err
	}
	say("ipvs-proxy exited; the kernel still holds %d virtual servers", strings.Count(out, "-A "))
	if err := ask("client", d.client.NS, nodeAIP+":30010", 2, "mysql-0", "mysql-1"); err != nil {
		return err
	}
	return d.checkMonitor()
}

// breakNode does what kube-proxy's IPVS mode does for nginx-other on every
// node: node-b's address bound on kube-ipvs0 with a virtual server on it.
func (d *demo) breakNode() error {
	for _, c := range [][]string{
		{"ip", "addr", "add", nodeBIP + "/32", "dev", "kube-ipvs0"},
		{"ipvsadm", "-A", "-t", nodeBIP + ":80", "-s", "rr"},
		{"ipvsadm", "-a", "-t", nodeBIP + ":80", "-r", "10.244.1.7:8080", "-m"},
		{"ipvsadm", "-a", "-t", nodeBIP + ":80", "-r", "10.244.1.8:8080", "-m"},
	} {
		if _, err := d.sh(c[0], c[1:]...); err != nil {
			return err
		}
	}
	if _, err := d.sh("ip", "-4", "-o", "addr", "show", "kube-ipvs0"); err != nil {
		return err
	}
	out, err := d.node.Request(ktest.TCP, fmt.Sprintf("%s:%d", nodeBIP, kubelet))
	fmt.Printf("    node-a$ request tcp %s:%d\n", nodeBIP, kubelet)
	if err == nil {
		return fmt.Errorf("node-b still answers (%q): the breakage did not take", out)
	}
	fmt.Printf("      %v\n", err)
	say("node-a now treats node-b's address as its own: its kubelet, API server, etcd are unreachable from here")
	return nil
}

// recover runs `ipvs-proxy recover` in node-a and returns its exit code.
func (d *demo) recover(extra ...string) (int, error) {
	args := append([]string{"recover",
		"--kubeconfig", d.proxyKubeconfig,
		"--hostname-override", nodeA,
		"--state-dir", d.stateDir,
		"--cluster-cidr", podCIDR,
	}, extra...)
	fmt.Printf("    node-a# ipvs-proxy %s\n", strings.Join(args, " "))
	out, err := d.node.Exec(d.proxyBin, args...)
	// Exec's error carries stderr; print stdout as is.
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Printf("      %s\n", l)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		fmt.Printf("      (exit status %d)\n", ee.ExitCode())
		if msg := stderrOf(err); msg != "" {
			fmt.Printf("      stderr: %s\n", msg)
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	fmt.Printf("      (exit status 0)\n")
	return 0, nil
}

// stderrOf extracts the stderr text ktest.NS.Exec appends to its error.
func stderrOf(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return strings.TrimSpace(s[i+2:])
	}
	return ""
}

func (d *demo) recoverDryRun() error {
	d.relay.stop()
	say("the relay to the API server is down: recover must work from the node and %s alone", filepath.Join(d.stateDir, "node-addresses.json"))
	code, err := d.recover()
	if err != nil {
		return err
	}
	if code == 0 {
		return errors.New("recover (dry run) found nothing")
	}
	out, err := d.node.Exec("ip", "-4", "-o", "addr", "show", "kube-ipvs0")
	if err != nil {
		return err
	}
	if !strings.Contains(out, nodeBIP+"/32") {
		return errors.New("the dry run removed node-b's address")
	}
	say("dry run: nothing changed yet")
	return nil
}

func (d *demo) recoverApply() error {
	code, err := d.recover("--apply")
	if err != nil {
		return err
	}
	out, err := d.node.Exec("ip", "-4", "-o", "addr", "show", "kube-ipvs0")
	if err != nil {
		return err
	}
	if strings.Contains(out, nodeBIP+"/32") {
		return fmt.Errorf("node-b's address is still on kube-ipvs0 (recover exit %d)", code)
	}
	ipvsOut, err := d.sh("ipvsadm", "-Ln", "-t", nodeBIP+":80")
	if err == nil {
		return fmt.Errorf("the virtual server on node-b's address is still there:\n%s", ipvsOut)
	}
	say("(ipvsadm: no such service: the virtual server went with the address)")
	return nil
}

func (d *demo) afterRecovery() error {
	if err := d.nodeBReachable(); err != nil {
		return err
	}
	for _, c := range []struct {
		who  string
		ns   *ktest.NS
		addr string
		want []string
	}{
		{"client-pod", d.clientPod.NS, mysqlVIP + ":3306", []string{"mysql-0", "mysql-1"}},
		{"client", d.client.NS, nodeAIP + ":30010", []string{"mysql-0", "mysql-1"}},
		{"client", d.client.NS, freeExtIP + ":80", []string{"nginx-0", "nginx-1"}},
	} {
		if err := ask(c.who, c.ns, c.addr, 2, c.want...); err != nil {
			return err
		}
	}
	if err := d.startRelay(); err != nil {
		return err
	}
	if err := d.startMonitor(); err != nil {
		return err
	}
	if err := d.startProxy(); err != nil {
		return err
	}
	// The restarted proxy adopts the kernel state; wait for its first sync
	// and check node-b is still reachable and the services still answer.
	err := waitFor(60*time.Second, func() error {
		if d.proxyExited() {
			return permanent{fmt.Errorf("ipvs-proxy run exited: %v", d.proxyErr)}
		}
		if len(d.grepProxyLog(1, "starting the first full sync")) < 1 {
			return errors.New("ipvs-proxy has not synced its caches")
		}
		body, err := d.httpGet("127.0.0.1:10249", "/metrics")
		if err != nil {
			return err
		}
		if !strings.Contains(body, `ipvs_proxy_syncs_total{mode="full"} `) || strings.Contains(body, `ipvs_proxy_syncs_total{mode="full"} 0`) {
			return errors.New("no full sync yet")
		}
		return nil
	})
	if err != nil {
		return err
	}
	say("ipvs-proxy run is back and has done its first full sync")
	if err := d.checkMonitor(); err != nil {
		return err
	}
	if err := d.nodeBReachable(); err != nil {
		return err
	}
	return ask("client", d.client.NS, nodeAIP+":30010", 2, "mysql-0", "mysql-1")
}

// relay forwards TCP connections accepted in one namespace to an address
// dialled from the VM's root namespace.
type relay struct {
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func (d *demo) startRelay() error {
	var l net.Listener
	err := d.node.Do(func() error {
		var err error
		l, err = net.Listen("tcp", relayAddr)
		return err
	})
	if err != nil {
		return fmt.Errorf("relay: listen %s in node-a: %w", relayAddr, err)
	}
	r := &relay{l: l, conns: map[net.Conn]bool{}}
	d.relay = r
	d.t.Cleanup(r.stop)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.pipe(c, d.apiAddr)
			}()
		}
	}()
	return nil
}

func (r *relay) track(c net.Conn, on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false
	}
	if on {
		r.conns[c] = true
	} else {
		delete(r.conns, c)
	}
	return true
}

func (r *relay) pipe(c net.Conn, target string) {
	defer c.Close()
	if !r.track(c, true) {
		return
	}
	defer r.track(c, false)
	u, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	if !r.track(u, true) {
		return
	}
	defer r.track(u, false)
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
}

// stop closes the listener and every relayed connection: the API server
// becomes unreachable from node-a.
func (r *relay) stop() {
	r.l.Close()
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	r.wg.Wait()
}
