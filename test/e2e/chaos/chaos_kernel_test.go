//go:build kernel

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/planinput"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

const (
	ns          = "chaos"
	thisNode    = "n1"
	clusterCIDR = "10.244.0.0/16,fd00:10:244::/48"
	// syncPeriod is the proxy's --sync-period: the bound on a tamper repair.
	syncPeriod = 3 * time.Second
	// convergeTimeout bounds one convergence after a restart or a tamper.
	convergeTimeout = 90 * time.Second
)

var (
	podA      = "10.244.0.2"
	podB      = "10.244.0.3"
	podClient = "10.244.0.9"
	// hostileIPs are node addresses; as externalIPs they must never be bound.
	hostileIPs = []string{"198.51.100.1", "198.51.100.2"}
)

func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return n
}

// cluster writes and churns the API objects.
type cluster struct {
	t      *testing.T
	client kubernetes.Interface
	rng    *rand.Rand
	n      int
	mu     sync.Mutex // serialises churn with dumps
}

func (c *cluster) ctx() context.Context { return context.Background() }

func slice(name, svc string, port int32, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr.To(thisNode),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func (c *cluster) setup() {
	t := c.t
	must := func(_ any, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	must(c.client.CoreV1().Namespaces().Create(c.ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	for name, addrs := range map[string][]string{thisNode: {"198.51.100.1", "2001:db8:100::1"}, "n2": {"198.51.100.2"}} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		created, err := c.client.CoreV1().Nodes().Create(c.ctx(), n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		must(c.client.CoreV1().Nodes().UpdateStatus(c.ctx(), created, metav1.UpdateOptions{}))
	}
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalIPs: []string{"203.0.113.10"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(ktest.BackendPort), NodePort: 30080}}},
	}
	must(c.client.CoreV1().Services(ns).Create(c.ctx(), web, metav1.CreateOptions{}))
	must(c.client.DiscoveryV1().EndpointSlices(ns).Create(c.ctx(), slice("web-1", "web", ktest.BackendPort, podA, podB), metav1.CreateOptions{}))
	for i := range c.n {
		name := fmt.Sprintf("s%02d", i)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		must(c.client.CoreV1().Services(ns).Create(c.ctx(), svc, metav1.CreateOptions{}))
		must(c.client.DiscoveryV1().EndpointSlices(ns).Create(c.ctx(), slice(name+"-1", name, 8080, c.fakeEndpoints(i, 2)...), metav1.CreateOptions{}))
	}
}

func (c *cluster) fakeEndpoints(i, n int) []string {
	var out []string
	for k := range n {
		out = append(out, fmt.Sprintf("10.244.%d.%d", 100+i, 1+k))
	}
	return out
}

// churnOnce changes one random churned service: its endpoints, its port,
// its externalIPs (node addresses included) or its session affinity.
func (c *cluster) churnOnce() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.rng.IntN(c.n)
	name := fmt.Sprintf("s%02d", i)
	switch c.rng.IntN(4) {
	case 0:
		s := slice(name+"-1", name, 8080, c.fakeEndpoints(i, c.rng.IntN(5))...)
		old, err := c.client.DiscoveryV1().EndpointSlices(ns).Get(c.ctx(), s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		old.Endpoints = s.Endpoints
		_, err = c.client.DiscoveryV1().EndpointSlices(ns).Update(c.ctx(), old, metav1.UpdateOptions{})
		return err
	}
	svc, err := c.client.CoreV1().Services(ns).Get(c.ctx(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	switch c.rng.IntN(3) {
	case 0:
		svc.Spec.Ports[0].Port = int32(80 + c.rng.IntN(3))
	case 1:
		svc.Spec.ExternalIPs = nil
		if c.rng.IntN(2) == 0 {
			svc.Spec.ExternalIPs = []string{fmt.Sprintf("203.0.113.%d", 100+i), hostileIPs[c.rng.IntN(len(hostileIPs))]}
		}
	case 2:
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
		} else {
			svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}
	}
	_, err = c.client.CoreV1().Services(ns).Update(c.ctx(), svc, metav1.UpdateOptions{})
	return err
}

// dump writes every Service, EndpointSlice and Node as one List file for
// `ipvs-proxy plan -f`.
func (c *cluster) dump(path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return planinput.Write(c.ctx(), c.client, path)
}

type env struct {
	t        *testing.T
	node     *ktest.Node
	bin      string
	kc       string
	dir      string
	runs     int
	stateDir string
	// webAddr is the steady service's ClusterIP:80, which every plan has.
	webAddr string
}

// start runs one more `ipvs-proxy run` in the node namespace, its log
// numbered by the run.
func (e *env) start() *ktest.Process {
	e.runs++
	return e.node.Start(e.t, filepath.Join(e.dir, fmt.Sprintf("proxy-%03d.log", e.runs)), e.bin, "run",
		"--kubeconfig", e.kc, "--hostname-override", thisNode, "--cluster-cidr", clusterCIDR,
		"--sync-period", syncPeriod.String(), "--min-sync-period", "0",
		"--healthz-bind-address", "", "--metrics-bind-address", "127.0.0.1:10249",
		"--state-dir", e.stateDir, "--log-level", "debug", "--log-format", "json")
}

// kill sends SIGKILL and reaps the process.
func kill(t *testing.T, p *ktest.Process) {
	t.Helper()
	if err := p.Kill(10 * time.Second); err != nil {
		t.Fatalf("proxy: %v", err)
	}
}

// --- the kernel and the plan in comparable forms ---

func lines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// snapshot is one view of the node's data plane in the plan's text forms,
// each section sorted (iptables: per chain, in order).
type snapshot map[string][]string

func (e *env) run(name string, args ...string) (string, error) { return e.node.Exec(name, args...) }

// kernel reads the node's data plane.
func (e *env) kernel() (snapshot, error) {
	s := snapshot{}
	out, err := e.run("ipvsadm", "-S", "-n")
	if err != nil {
		return nil, err
	}
	s["ipvs"] = sorted(lines(out))
	out, err = e.run("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	if err != nil {
		return nil, err
	}
	for _, l := range lines(out) {
		if f := strings.Fields(l); len(f) >= 4 {
			s["kube-ipvs0"] = append(s["kube-ipvs0"], f[3])
		}
	}
	slices.Sort(s["kube-ipvs0"])
	out, err = e.run("ipset", "save")
	if err != nil {
		return nil, err
	}
	for _, l := range lines(out) {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "add" && strings.HasPrefix(f[1], "KUBE-") {
			s["ipset"] = append(s["ipset"], l)
		} else if len(f) >= 2 && f[0] == "create" && strings.HasPrefix(f[1], "KUBE-") {
			s["ipset"] = append(s["ipset"], "create "+f[1])
		}
	}
	slices.Sort(s["ipset"])
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "filter"} {
			out, err = e.run(fam+"-save", "-t", table)
			if err != nil {
				return nil, err
			}
			s[fam] = append(s[fam], proxyRules(table, out)...)
		}
	}
	return s, nil
}

// proxyRules keeps the rules of KUBE- chains and the jumps to them, per
// chain in order, chains sorted.
func proxyRules(table, save string) []string {
	byChain := map[string][]string{}
	for _, l := range lines(save) {
		if !strings.HasPrefix(l, "-A ") {
			continue
		}
		f := strings.Fields(l)
		j := slices.Index(f, "-j")
		if strings.HasPrefix(f[1], "KUBE-") || j > 0 && j+1 < len(f) && strings.HasPrefix(f[j+1], "KUBE-") {
			byChain[f[1]] = append(byChain[f[1]], l)
		}
	}
	out := []string{"*" + table}
	for _, c := range slices.Sorted(maps.Keys(byChain)) {
		out = append(out, byChain[c]...)
	}
	return out
}

func sorted(s []string) []string { slices.Sort(s); return s }

// nodeIPs are the node's addresses on every interface but kube-ipvs0, as
// `run` reads them: plan gets the same as --node-ip.
func (e *env) nodeIPs() (string, error) {
	out, err := e.run("ip", "-o", "addr", "show")
	if err != nil {
		return "", err
	}
	var ips []string
	for _, l := range lines(out) {
		f := strings.Fields(l)
		if len(f) >= 4 && f[1] != "kube-ipvs0" {
			ips = append(ips, strings.Split(f[3], "/")[0])
		}
	}
	return strings.Join(ips, ","), nil
}

// plan runs `ipvs-proxy plan` on the objects in file with the node's
// identity and run's flags, in the kernel's forms.
func (e *env) plan(file string) (snapshot, string, error) {
	ips, err := e.nodeIPs()
	if err != nil {
		return nil, "", err
	}
	out, err := exec.Command(e.bin, "plan", "-f", file, "--node-name", thisNode, "--node-ip", ips,
		"--cluster-cidr", clusterCIDR, "--api-server-address", "127.0.0.1").Output()
	if err != nil {
		return nil, "", fmt.Errorf("ipvs-proxy plan: %w", err)
	}
	s := snapshot{}
	section := ""
	table := ""
	byChain := map[string]map[string][]string{}
	for _, l := range lines(string(out)) {
		if strings.HasPrefix(l, "# ") {
			section = strings.TrimPrefix(l, "# ")
			continue
		}
		switch section {
		case "ipvs", "kube-ipvs0":
			s[section] = append(s[section], l)
		case "ipset":
			f := strings.Fields(l)
			if f[0] == "create" {
				l = "create " + f[1]
			}
			s["ipset"] = append(s["ipset"], l)
		case "iptables", "ip6tables":
			if strings.HasPrefix(l, "*") {
				table = l
				continue
			}
			if !strings.HasPrefix(l, "-A ") {
				continue
			}
			k := section + " " + table
			if byChain[k] == nil {
				byChain[k] = map[string][]string{}
			}
			ch := strings.Fields(l)[1]
			byChain[k][ch] = append(byChain[k][ch], l)
		}
	}
	for _, sec := range []string{"ipvs", "kube-ipvs0", "ipset"} {
		slices.Sort(s[sec])
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, tb := range []string{"nat", "filter"} {
			s[fam] = append(s[fam], "*"+tb)
			m := byChain[fam+" *"+tb]
			for _, c := range slices.Sorted(maps.Keys(m)) {
				s[fam] = append(s[fam], m[c]...)
			}
		}
	}
	return s, string(out), nil
}

// diff names what differs, section by section.
func diff(plan, kernel snapshot) string {
	var b strings.Builder
	for _, sec := range []string{"ipvs", "kube-ipvs0", "ipset", "iptables", "ip6tables"} {
		p, k := plan[sec], kernel[sec]
		if slices.Equal(p, k) {
			continue
		}
		fmt.Fprintf(&b, "%s:\n", sec)
		for _, l := range p {
			if !slices.Contains(k, l) {
				fmt.Fprintf(&b, "  missing: %s\n", l)
			}
		}
		for _, l := range k {
			if !slices.Contains(p, l) {
				fmt.Fprintf(&b, "  extra:   %s\n", l)
			}
		}
		if len(p) != len(k) || slices.Equal(sorted(slices.Clone(p)), sorted(slices.Clone(k))) {
			// The same rules in another order or count: show both.
			fmt.Fprintf(&b, "  plan:   %q\n  kernel: %q\n", p, k)
		}
		if b.Len() > 4000 {
			break
		}
	}
	return b.String()
}

// converge waits until the kernel equals the plan of the current objects.
func (e *env) converge(c *cluster, p *ktest.Process) (time.Duration, string) {
	start := time.Now()
	file := filepath.Join(e.dir, "objects.json")
	last := ""
	for time.Since(start) < convergeTimeout {
		if !p.Alive() {
			return time.Since(start), "proxy exited: see " + p.Log + "\n" + p.Tail(40)
		}
		if err := c.dump(file); err != nil {
			last = err.Error()
		} else if want, _, err := e.plan(file); err != nil {
			last = err.Error()
		} else if got, err := e.kernel(); err != nil {
			last = err.Error()
		} else if !slices.ContainsFunc(want["ipvs"], func(l string) bool { return strings.HasPrefix(l, "-A -t "+e.webAddr+" ") }) {
			last = "the plan has no virtual server for the steady service " + e.webAddr
		} else if d := diff(want, got); d == "" {
			return time.Since(start), ""
		} else {
			last = d
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Since(start), "did not converge within " + convergeTimeout.String() + ":\n" + last + "\nproxy log tail:\n" + p.Tail(40)
}

// removeLeakedVS deletes the virtual servers a convergence diff lists as
// extra (`ipvsadm -D`) and returns how many it deleted.
func (e *env) removeLeakedVS(d string) int {
	n := 0
	for _, l := range lines(d) {
		f := strings.Fields(l)
		// "extra: -A -t 198.51.100.1:80 -s rr"
		if len(f) >= 4 && f[0] == "extra:" && f[1] == "-A" {
			if _, err := e.run("ipvsadm", "-D", f[2], f[3]); err == nil {
				n++
			}
		}
	}
	return n
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = append(ls[:n], "...")
	}
	return strings.Join(ls, "\n")
}

// tamperTokens are what a log line naming each tamper's repair contains,
// in the order of the tampers.
func tamperTokens(webIP string) []string {
	return []string{webIP + ":80", "198.51.100.2", "KUBE-SERVICES", "KUBE-CLUSTER-IP"}
}

// driftRepairs reads ipvs_proxy_drift_repairs_total by kind from a
// /metrics text.
func driftRepairs(metrics string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(metrics, "\n") {
		rest, ok := strings.CutPrefix(line, `ipvs_proxy_drift_repairs_total{kind="`)
		if !ok {
			continue
		}
		kind, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[kind] = v
		}
	}
	return out
}

// TestChaosGuest is the VM half of TestChaos.
func TestChaosGuest(t *testing.T) {
	kills := envInt(t, "CHAOS_KILLS", 3)
	seed := envInt(t, "CHAOS_SEED", 1)
	nsvc := envInt(t, "CHAOS_SERVICES", 20)
	apiAddr := vmtest.GuestEnv(t, "VMTEST_API_ADDR")
	cfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "CHAOS_KUBECONFIG_GUEST"))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)

	node := ktest.NewNode(t)
	node.AddPod(t, "pod-a", podA)
	node.AddPod(t, "pod-b", podB)
	client1 := node.AddPod(t, "client", podClient)
	// The LAN client also gives the node its addresses (198.51.100.1 on the
	// bridge eth0): without them the node has no family to plan.
	lan := node.AddClient(t, "lan")
	_, apiPort, err := net.SplitHostPort(apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	node.Relay(t, "127.0.0.1:"+apiPort, apiAddr)

	e := &env{t: t, node: node, bin: vmtest.GuestEnv(t, "CHAOS_PROXY_BIN"), kc: vmtest.GuestEnv(t, "CHAOS_KUBECONFIG_PROXY"), dir: t.TempDir()}
	e.stateDir = filepath.Join(e.dir, "state")
	c := &cluster{t: t, client: client, rng: rand.New(rand.NewPCG(uint64(seed), 11)), n: nsvc}
	c.setup()
	web, err := client.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	webAddr := net.JoinHostPort(web.Spec.ClusterIP, "80")
	e.webAddr = webAddr

	var findings []string
	var convergeTimes []time.Duration
	churnErrs := 0
	leakedVS := 0

	// Kill -9 at random points while the churner changes objects.
	p := e.start()
	for k := range kills {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := c.churnOnce(); err != nil && !apierrors.IsConflict(err) {
					churnErrs++
				}
				time.Sleep(time.Duration(50+c.rng.IntN(200)) * time.Millisecond)
			}
		}()
		time.Sleep(time.Duration(c.rng.IntN(4000)) * time.Millisecond)
		kill(t, p)
		stop()
		wg.Wait()
		p = e.start()
		d, bad := e.converge(c, p)
		convergeTimes = append(convergeTimes, d)
		if bad != "" {
			findings = append(findings, fmt.Sprintf("kill %d: %s", k+1, firstLines(bad, 12)))
			t.Logf("kill %d: %s", k+1, bad)
			// A leaked virtual server stays leaked: remove it by hand so
			// that the next kills are judged on their own.
			removed := e.removeLeakedVS(bad)
			leakedVS += removed
			if removed > 0 {
				if _, bad := e.converge(c, p); bad != "" {
					t.Logf("kill %d: still not converged after removing %d leaked virtual servers: %s", k+1, removed, bad)
					continue
				}
			}
			continue
		}
		for _, r := range []struct {
			from *ktest.NS
			addr string
		}{{client1.NS, webAddr}, {lan.NS, "198.51.100.1:30080"}, {lan.NS, "203.0.113.10:80"}} {
			if out, err := r.from.Request(ktest.TCP, r.addr); err != nil || !(strings.HasPrefix(out, "pod-a ") || strings.HasPrefix(out, "pod-b ")) {
				findings = append(findings, fmt.Sprintf("kill %d: request to web at %s: %q %v", k+1, r.addr, out, err))
			}
		}
		t.Logf("kill %d/%d: converged %v after restart", k+1, kills, d.Round(10*time.Millisecond))
	}

	// Tampering, each repaired by the next full resync.
	webIP := web.Spec.ClusterIP
	tampers := []struct {
		name string
		cmd  []string
	}{
		{"delete virtual server (ipvsadm -D)", []string{"ipvsadm", "-D", "-t", webAddr}},
		{"rogue node address on kube-ipvs0", []string{"ip", "addr", "add", "198.51.100.2/32", "dev", "kube-ipvs0"}},
		{"flush chain KUBE-SERVICES", []string{"iptables", "-t", "nat", "-F", "KUBE-SERVICES"}},
		{"delete ipset entry", []string{"ipset", "del", "KUBE-CLUSTER-IP", webIP + ",tcp:80"}},
	}
	var tamperTimes []string
	for i, tm := range tampers {
		before := p.Output()
		if _, err := e.run(tm.cmd[0], tm.cmd[1:]...); err != nil {
			findings = append(findings, fmt.Sprintf("tamper %q: %v", tm.name, err))
			continue
		}
		d, bad := e.converge(c, p)
		if bad != "" {
			findings = append(findings, fmt.Sprintf("tamper %q: %s", tm.name, bad))
		}
		// Each repair is named in a log line (the tampered object) and
		// counted in ipvs_proxy_drift_repairs_total.
		after := p.Output()
		named := strings.Contains(after[min(len(before), len(after)):], tamperTokens(webIP)[i])
		if !named {
			findings = append(findings, fmt.Sprintf("tamper %q: no log line after it names %s", tm.name, tamperTokens(webIP)[i]))
		}
		tamperTimes = append(tamperTimes, fmt.Sprintf("%s: repaired in %v; named in the log after it: %v", tm.name, d.Round(10*time.Millisecond), named))
	}
	_, metrics, err := e.node.HTTPGet("127.0.0.1:10249", "/metrics", 10*time.Second)
	drift := driftRepairs(metrics)
	tamperTimes = append(tamperTimes, fmt.Sprintf("ipvs_proxy_drift_repairs_total after the tampers: %v (%v)", drift, err))
	for _, kind := range []string{"virtual_server", "address", "ipset_entry", "iptables_table"} {
		if drift[kind] < 1 {
			findings = append(findings, fmt.Sprintf("ipvs_proxy_drift_repairs_total{kind=%q} is %v after its tamper, want at least 1", kind, drift[kind]))
		}
	}
	kill(t, p)

	var b bytes.Buffer
	fmt.Fprintf(&b, "CHAOS-REPORT-BEGIN\nkills %d, seed %d, churned services %d, proxy runs %d, sync period %v, churn errors %d\n",
		kills, seed, nsvc, e.runs, syncPeriod, churnErrs)
	if len(convergeTimes) > 0 {
		s := slices.Clone(convergeTimes)
		slices.Sort(s)
		fmt.Fprintf(&b, "convergence after restart: p50 %v, p90 %v, max %v\n", s[len(s)/2].Round(10*time.Millisecond),
			s[len(s)*9/10].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond))
	}
	for _, l := range tamperTimes {
		fmt.Fprintln(&b, l)
	}
	fmt.Fprintf(&b, "leaked virtual servers removed by hand: %d\n", leakedVS)
	fmt.Fprintf(&b, "findings: %d\n", len(findings))
	for _, f := range findings {
		fmt.Fprintln(&b, "  "+f)
	}
	fmt.Fprintln(&b, "CHAOS-REPORT-END")
	t.Log("\n" + b.String())
	if len(findings) > 0 {
		t.Errorf("%d findings", len(findings))
	}
}
