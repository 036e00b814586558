//go:build kernel

package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
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
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/planinput"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
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
	// hostileIPs are node addresses; as externalIPs they must never be
	// bound. The third is Node n3's, which only the daemon soak creates
	// (and deletes again): protected while n3 exists.
	hostileIPs = []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"}
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
	// eps is how many endpoints each churned service starts with (2 when 0).
	eps int
	mu  sync.Mutex // serialises churn with dumps
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
	eps := c.eps
	if eps == 0 {
		eps = 2
	}
	// Four writers: at 10,000 services the objects are 20,000 creates.
	next := make(chan int)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var first error
			for i := range next {
				if err := c.createChurned(i, eps); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for i := range c.n {
		next <- i
	}
	close(next)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// churnedName is the name of churned service i and the prefix of its slice.
func churnedName(i int) string { return fmt.Sprintf("s%02d", i) }

// createChurned creates churned service i with eps endpoints, or what of
// it is missing.
func (c *cluster) createChurned(i, eps int) error {
	name := churnedName(i)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := c.client.CoreV1().Services(ns).Create(c.ctx(), svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	s := slice(name+"-1", name, 8080, c.fakeEndpoints(i, eps)...)
	if _, err := c.client.DiscoveryV1().EndpointSlices(ns).Create(c.ctx(), s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create endpointslice %s: %w", s.Name, err)
	}
	return nil
}

// fakeEndpoints are n addresses of churned service i, in 10.128.0.0/9
// (outside the cluster CIDR: nothing answers on them), unique per service
// up to 32,000 services.
func (c *cluster) fakeEndpoints(i, n int) []string {
	var out []string
	for k := range n {
		out = append(out, fmt.Sprintf("10.%d.%d.%d", 128+i/250, i%250, 1+k))
	}
	return out
}

// externalIP is churned service i's own externalIP: 203.0.113.(100+i) for
// the first 156, then from 100.64.0.0/10 (no two services share one).
func externalIP(i int) string {
	if i < 156 {
		return fmt.Sprintf("203.0.113.%d", 100+i)
	}
	return fmt.Sprintf("100.%d.%d.1", 64+i/256, i%256)
}

// churnOnce changes one random churned service: its endpoints, its port,
// its externalIPs (node addresses included) or its session affinity.
func (c *cluster) churnOnce() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.rng.IntN(c.n)
	name := churnedName(i)
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
			svc.Spec.ExternalIPs = []string{externalIP(i), hostileIPs[c.rng.IntN(len(hostileIPs))]}
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
	// took is what each command of the last kernel read took.
	took strings.Builder
	// profiling serves /debug/pprof/ beside /metrics (--profiling).
	profiling bool
	// convergeTimeout bounds one convergence (the package's when 0).
	convergeTimeout time.Duration
	// syncPeriod is the proxy's --sync-period (the package's when 0).
	syncPeriod time.Duration
	// lastDiff is, after a convergence, the last difference it saw before
	// the kernel equalled the plan ("" when it did at once).
	lastDiff string
}

// start runs one more `ipvs-proxy run` in the node namespace, its log
// numbered by the run.
func (e *env) start() *ktest.Process {
	e.runs++
	flags := []string{"--min-sync-period", "0"}
	if e.profiling {
		flags = append(flags, "--profiling")
	}
	return harness.StartProxy(e.t, e.node.NS, harness.Proxy{Bin: e.bin, Kubeconfig: e.kc, Node: thisNode,
		ClusterCIDR: clusterCIDR, SyncPeriod: cmp.Or(e.syncPeriod, syncPeriod), StateDir: e.stateDir,
		Log: filepath.Join(e.dir, fmt.Sprintf("proxy-%03d.log", e.runs)), NoHealthz: true, LogFormat: "json", Flags: flags})
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

// run execs one command in the node namespace; what it took is added to
// e.took.
func (e *env) run(name string, args ...string) (string, error) {
	return e.timed(strings.Join(append([]string{name}, args...), " "), func() (string, error) { return e.node.Exec(name, args...) })
}

// timed runs read and adds what it took to e.took, as label.
func (e *env) timed(label string, read func() (string, error)) (string, error) {
	t0 := time.Now()
	out, err := read()
	fmt.Fprintf(&e.took, ", %s %v", label, time.Since(t0).Round(10*time.Millisecond))
	return out, err
}

// kernel reads the node's data plane; e.took says what each command took.
func (e *env) kernel() (snapshot, error) {
	e.took.Reset()
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
	out, err = e.timed("ipset save", func() (string, error) { return e.node.IPSetSave() })
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

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

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
	args := []string{"plan", "-f", file, "--node-name", thisNode, "--node-ip", ips,
		"--cluster-cidr", clusterCIDR, "--api-server-address", "127.0.0.1"}
	// The proxy's node address cache, once written: a Node deleted from
	// the API stays protected for --deleted-node-grace-period (24 h), and
	// plan honours the same history with it.
	if cache := filepath.Join(e.stateDir, informers.NodeAddressFile); fileExists(cache) {
		args = append(args, "--node-cache", cache)
	}
	out, err := exec.Command(e.bin, args...).Output()
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

// diff names what differs, section by section. It is linear in the
// sections' lengths: at 10,000 services the IPVS section has 110,000 lines.
func diff(plan, kernel snapshot) string {
	var b strings.Builder
	for _, sec := range []string{"ipvs", "kube-ipvs0", "ipset", "iptables", "ip6tables"} {
		p, k := plan[sec], kernel[sec]
		if slices.Equal(p, k) {
			continue
		}
		fmt.Fprintf(&b, "%s:\n", sec)
		inP, inK := set(p), set(k)
		for _, l := range p {
			if !inK[l] {
				fmt.Fprintf(&b, "  missing: %s\n", l)
			}
		}
		for _, l := range k {
			if !inP[l] {
				fmt.Fprintf(&b, "  extra:   %s\n", l)
			}
		}
		if (len(p) != len(k) || slices.Equal(sorted(slices.Clone(p)), sorted(slices.Clone(k)))) && len(p)+len(k) <= 80 {
			// The same rules in another order or count: show both.
			fmt.Fprintf(&b, "  plan:   %q\n  kernel: %q\n", p, k)
		}
		if b.Len() > 4000 {
			break
		}
	}
	return b.String()
}

func set(lines []string) map[string]bool {
	m := make(map[string]bool, len(lines))
	for _, l := range lines {
		m[l] = true
	}
	return m
}

// firstSyncLine is logged by the proxy once its first full sync applied
// everything.
const firstSyncLine = "first full sync applied"

// converge waits until the kernel equals the plan of the current objects.
func (e *env) converge(c *cluster, p *ktest.Process) (time.Duration, string) {
	start := time.Now()
	timeout := cmp.Or(e.convergeTimeout, convergeTimeout)
	last := ""
	// A comparison waits for the proxy's first full sync: before it the
	// kernel cannot hold the plan (or holds what a killed proxy left, which
	// must not count as this run's), and at 10,000 services under TCG each
	// comparison takes minutes of the CPU the first sync needs.
	for !p.OutputHas(firstSyncLine) {
		if !p.Alive() {
			return time.Since(start), "proxy exited before its first full sync: see " + p.Log + "\n" + p.Tail(40)
		}
		if time.Since(start) >= timeout {
			return time.Since(start), "no first full sync within " + timeout.String() + "\nproxy log tail:\n" + p.Tail(40)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for time.Since(start) < timeout {
		if !p.Alive() {
			return time.Since(start), "proxy exited: see " + p.Log + "\n" + p.Tail(40)
		}
		at := time.Since(start)
		d, took, err := e.compare(c)
		if slow := time.Since(start) - at; slow > 10*time.Second {
			e.t.Logf("converge: the comparison begun at %v took %v (%s)", at.Round(time.Second), slow.Round(time.Second), took)
		}
		switch {
		case err != nil:
			last = err.Error()
		case d == "":
			e.lastDiff = last
			return time.Since(start), ""
		default:
			last = fmt.Sprintf("(at %v, %s)\n%s", at.Round(time.Second), took, d)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Since(start), "did not converge within " + timeout.String() + ":\n" + last + "\nproxy log tail:\n" + p.Tail(40)
}

// compare reads the objects, plans them and reads the kernel once: what
// differs ("" for nothing) and what each step took.
func (e *env) compare(c *cluster) (string, string, error) {
	file := filepath.Join(e.dir, "objects.json")
	t0 := time.Now()
	if err := c.dump(file); err != nil {
		return "", "", err
	}
	t1 := time.Now()
	want, _, err := e.plan(file)
	if err != nil {
		return "", "", err
	}
	t2 := time.Now()
	got, err := e.kernel()
	if err != nil {
		return "", "", err
	}
	t3 := time.Now()
	if !slices.ContainsFunc(want["ipvs"], func(l string) bool { return strings.HasPrefix(l, "-A -t "+e.webAddr+" ") }) {
		return "", "", fmt.Errorf("the plan has no virtual server for the steady service %s", e.webAddr)
	}
	d := diff(want, got)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return d, fmt.Sprintf("objects read in %v, planned in %v, kernel read in %v (%s), compared in %v",
		r(t1.Sub(t0)), r(t2.Sub(t1)), r(t3.Sub(t2)), strings.TrimPrefix(e.took.String(), ", "), r(time.Since(t3))), nil
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = append(ls[:n], "...")
	}
	return strings.Join(ls, "\n")
}
