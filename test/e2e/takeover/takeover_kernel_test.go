//go:build kernel

package takeover

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

const (
	// syncPeriod is ipvs.syncPeriod in kube-proxy's config.conf, which both
	// proxies read (kubeadm's default is 30s: shorter, so that the test sees
	// several periodic syncs of each within its budget).
	syncPeriod = 10 * time.Second
	// kubeProxySyncWait bounds a wait for kube-proxy's next sync: one
	// sync of its in the emulated VM takes minutes on a loaded host, so
	// this is a bound on the bed,
	// not a claim about kube-proxy's speed; a wait that ends sooner is not
	// shortened by it.
	kubeProxySyncWait = 2*syncPeriod + 5*time.Minute
	// interval is the pause between two requests of a loop.
	interval = 100 * time.Millisecond
)

// bed is the node, its pods and clients, and the cluster's Services.
type bed struct {
	t               *testing.T
	node            *ktest.Node
	pods            pods
	client          *ktest.Pod
	lan, lan2       *ktest.Client
	svcs            map[string]serviceAddrs
	dir             string
	kubeProxyConfig string
	kubeProxyBin    string
	proxyBin        string
	proxyKubeconfig string
	cluster         *cluster
	// takeoverProxy is the ipvs-proxy that took the node over.
	takeoverProxy    *ipvsProxy
	apiServerAddress string
	// witness records the evidence about failed requests.
	witness *witness
	// cycle counts the takeover and rollback cycles done (see cycles).
	cycle int
	// mode is kube-proxy's mode before the takeover and after the way
	// back: TAKEOVER_MODE, "" for ipvs (see modes_kernel_test.go).
	mode string
}

// cycles is how many takeover and rollback cycles TestTakeoverGuest runs
// in one boot: 1, or TAKEOVER_CYCLES (to reproduce a rare failure without
// a boot and kube-proxy's first sync per try). Only the last rollback is
// followed by the cleanup step.
func cycles(t *testing.T) int {
	v := os.Getenv("TAKEOVER_CYCLES")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("TAKEOVER_CYCLES=%q: want a positive number", v)
	}
	return n
}

// serviceAddrs are a Service's ClusterIPs.
type serviceAddrs struct{ v4, v6 string }

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

// loopTargets are the request loops: every kind of address the node
// serves, from where it is used.
func (b *bed) loopTargets() []target {
	node := ktest.NodeIPv4.String()
	ab := []string{"pod-a", "pod-b"}
	return []target{
		{"clusterip from pod", b.client.NS, ktest.TCP, hostPort(b.svcs["web"].v4, 80), ab},
		{"clusterip from node", b.node.NS, ktest.TCP, hostPort(b.svcs["web"].v4, 80), ab},
		{"clusterip ipv6 (dual)", b.client.NS, ktest.TCP, hostPort(b.svcs["dual"].v6, 80), ab},
		{"clusterip affinity", b.client.NS, ktest.TCP, hostPort(b.svcs["sticky"].v4, 80), ab},
		{"clusterip itp local", b.client.NS, ktest.TCP, hostPort(b.svcs["itp"].v4, 80), []string{"pod-b"}},
		{"clusterip terminating", b.client.NS, ktest.TCP, hostPort(b.svcs["term"].v4, 80), []string{"pod-a"}},
		{"nodeport tcp", b.lan.NS, ktest.TCP, hostPort(node, npTCP), ab},
		{"nodeport udp", b.lan.NS, ktest.UDP, hostPort(node, npUDP), ab},
		{"nodeport sctp", b.lan.NS, ktest.SCTP, hostPort(node, npSCTP), ab},
		{"externalip", b.lan.NS, ktest.TCP, hostPort(externalIP, 80), ab},
		{"loadbalancer", b.lan.NS, ktest.TCP, hostPort(lbIP, 80), ab},
		{"loadbalancer etp local", b.lan.NS, ktest.TCP, hostPort(lbLocalIP, 80), []string{"pod-a"}},
	}
}

// controlTargets are requests from the same clients straight to a pod's
// own addresses, through no virtual server: the bed's health beside the
// proxied traffic (see traffic.snapshot).
func (b *bed) controlTargets() []target {
	var out []target
	for _, a := range b.pods.a.Addrs {
		out = append(out, target{"pod-a " + a.String() + " from pod", b.client.NS, ktest.TCP,
			hostPort(a.String(), controlPort), []string{"pod-a"}})
	}
	return out
}

// streamTargets are the long-lived connections.
func (b *bed) streamTargets() []target {
	node := ktest.NodeIPv4.String()
	return []target{
		{"stream clusterip 1", b.client.NS, ktest.TCP, hostPort(b.svcs["web"].v4, 81), nil},
		{"stream clusterip 2", b.client.NS, ktest.TCP, hostPort(b.svcs["web"].v4, 81), nil},
		{"stream nodeport", b.lan.NS, ktest.TCP, hostPort(node, npStream), nil},
		{"stream externalip", b.lan.NS, ktest.TCP, hostPort(externalIP, 81), nil},
		{"stream loadbalancer", b.lan.NS, ktest.TCP, hostPort(lbIP, 81), nil},
	}
}

// serving waits until every loop target answers once, and returns how
// long that took.
func (b *bed) serving(timeout time.Duration) time.Duration {
	b.t.Helper()
	start := time.Now()
	for _, tg := range b.loopTargets() {
		var last string
		for {
			out, err := tg.from.Request(tg.proto, tg.addr)
			if err == nil && answeredBy(out, tg.want) {
				break
			}
			last = fmt.Sprintf("%q %v", out, err)
			if time.Since(start) > timeout {
				b.t.Fatalf("%s (%s %s) not served within %v: %s", tg.name, tg.proto, tg.addr, timeout, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// denied checks that the LoadBalancer's source ranges still keep lan2 out.
func (b *bed) denied() {
	b.t.Helper()
	if out, err := b.lan2.Request(ktest.TCP, hostPort(lbIP, 80)); err == nil {
		b.t.Errorf("lan2 (%s, outside loadBalancerSourceRanges %s) reached the LoadBalancer: %q", lan2Addr, lbAllowed, out)
	}
}

func newBed(t *testing.T) *bed {
	apiAddr := vmtest.GuestEnv(t, "VMTEST_API_ADDR")
	cfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "TAKEOVER_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{t: t, dir: t.TempDir(), kubeProxyBin: vmtest.GuestEnv(t, "KUBE_PROXY_BIN"), proxyBin: vmtest.GuestEnv(t, "TAKEOVER_PROXY_BIN"),
		proxyKubeconfig: vmtest.GuestEnv(t, "TAKEOVER_KUBECONFIG_PROXY"), apiServerAddress: "127.0.0.1", mode: kubeProxyMode(t)}
	b.cluster = &cluster{t: t, client: kubernetes.NewForConfigOrDie(cfg)}
	b.node = ktest.NewNode(t)
	b.pods = pods{a: b.node.AddPod(t, "pod-a"), b: b.node.AddPod(t, "pod-b"), c: b.node.AddPod(t, "pod-c")}
	for _, p := range []*ktest.Pod{b.pods.a, b.pods.b, b.pods.c} {
		listenEcho(t, p)
	}
	b.pods.a.Listen(t, ktest.TCP, controlPort)
	b.client = b.node.AddPod(t, "client")
	b.lan = b.node.AddClient(t, "lan")
	b.lan2 = b.node.AddClient(t, "lan2", lan2Addr, "2001:db8:100::40")
	b.defaultRoute()
	_, apiPort, err := net.SplitHostPort(apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	b.node.Relay(t, "127.0.0.1:"+apiPort, apiAddr)

	b.svcs = map[string]serviceAddrs{}
	for name, svc := range b.cluster.setup(b.pods) {
		var a serviceAddrs
		for _, ip := range svc.Spec.ClusterIPs {
			if netip.MustParseAddr(ip).Is4() {
				a.v4 = ip
			} else {
				a.v6 = ip
			}
		}
		b.svcs[name] = a
	}
	b.kubeProxyConfig = filepath.Join(b.dir, "config.conf")
	kc := kubeproxy.Config{Kubeconfig: vmtest.GuestEnv(t, "TAKEOVER_KUBECONFIG_KUBE_PROXY"), ClusterCIDR: clusterCIDR, SyncPeriod: syncPeriod, Mode: b.mode}
	if err := kc.WriteFile(b.kubeProxyConfig); err != nil {
		t.Fatal(err)
	}
	return b
}

// startKubeProxy starts kube-proxy as kubeadm's DaemonSet does and waits
// for its first sync; it returns the process and how long the first sync
// took to end after the start.
func (b *bed) startKubeProxy(log string) (*kubeproxy.Process, time.Duration) {
	b.t.Helper()
	start := time.Now()
	kp := kubeproxy.Start(b.t, b.node.NS, kubeproxy.Options{Bin: b.kubeProxyBin, NodeName: thisNode,
		ConfigFile: b.kubeProxyConfig, LogFile: filepath.Join(b.dir, log), Verbosity: 2})
	ts, err := kp.WaitSync(families, time.Time{}, 8*time.Minute)
	if err != nil {
		b.t.Fatal(err)
	}
	return kp, ts.Sub(start)
}

// TestTakeoverGuest is the VM half of TestTakeover.
func TestTakeoverGuest(t *testing.T) {
	b := newBed(t)

	// Why the bed's config.conf sets conntrack.maxPerCore 0 (see package
	// kubeproxy): the limit is read-only in the node namespace.
	t.Logf("writing net.netfilter.nf_conntrack_max in the node namespace, as kube-proxy's default conntrack.maxPerCore would: %v",
		b.node.Sysctl("net/netfilter/nf_conntrack_max", "262144"))

	// 1. kube-proxy programs the node.
	kp, firstSync := b.startKubeProxy("kube-proxy-1.log")
	servedAfter := b.serving(time.Minute)
	b.denied()
	if code, body, err := kp.Healthz(); err != nil || code != 200 {
		t.Errorf("kube-proxy /healthz after its first sync: %d %v %s", code, err, body)
	}
	t.Logf("kube-proxy %s: first sync ended %v after start; every address served %v later", kubeproxy.Version, firstSync, servedAfter)
	ipvsLines, _ := b.node.Exec("ipvsadm", "-S", "-n")
	t.Logf("kube-proxy programmed %d IPVS lines (virtual and real servers)", strings.Count(ipvsLines, "\n"))

	b.saveIPTablesMode()

	// 2. The takeover; 3. the way back; as many times as asked.
	b.witness = b.startWitness()
	n := cycles(t)
	for b.cycle = 0; b.cycle < n; b.cycle++ {
		rep := b.takeover(kp)
		rep += b.checkModeGone()
		t.Logf("TAKEOVER-REPORT-BEGIN (cycle %d of %d)\n%sTAKEOVER-REPORT-END", b.cycle+1, n, rep)
		rep, kp = b.rollback(b.takeoverProxy)
		switch {
		case b.cycle == n-1 && b.mode != "":
			// 4. The way out: ipvs-proxy's state goes, kube-proxy's stays.
			rep += b.wayOut(kp)
		case b.cycle == n-1:
			// 4. ipvs-proxy cleanup after the rollback leaves kube-proxy's state.
			rep += b.cleanupAfterRollback(kp)
		}
		t.Logf("ROLLBACK-REPORT-BEGIN (cycle %d of %d)\n%sROLLBACK-REPORT-END", b.cycle+1, n, rep)
	}
}
