package churn

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/planinput"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

const (
	ns          = "chaos"
	thisNode    = "n1"
	clusterCIDR = "10.244.0.0/16,fd00:10:244::/48"
	// SyncPeriod is the proxy's --sync-period: the bound on a tamper repair.
	SyncPeriod = 3 * time.Second
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

func EnvInt(t *testing.T, key string, def int) int {
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

// Cluster writes and churns the API objects.
type Cluster struct {
	t      *testing.T
	Client kubernetes.Interface
	Rng    *rand.Rand
	n      int
	// eps is how many endpoints each churned service starts with (2 when 0).
	eps int
	mu  sync.Mutex // serialises churn with dumps
}

// NewCluster is a churner of n Services of eps endpoints each (2 when 0)
// through client, its choices drawn from rng.
func NewCluster(t *testing.T, client kubernetes.Interface, rng *rand.Rand, n, eps int) *Cluster {
	return &Cluster{t: t, Client: client, Rng: rng, n: n, eps: eps}
}

func (c *Cluster) ctx() context.Context { return context.Background() }

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

func (c *Cluster) Setup() {
	t := c.t
	must := func(_ any, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	must(c.Client.CoreV1().Namespaces().Create(c.ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	for name, addrs := range map[string][]string{thisNode: {"198.51.100.1", "2001:db8:100::1"}, "n2": {"198.51.100.2"}} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		created, err := c.Client.CoreV1().Nodes().Create(c.ctx(), n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		must(c.Client.CoreV1().Nodes().UpdateStatus(c.ctx(), created, metav1.UpdateOptions{}))
	}
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalIPs: []string{"203.0.113.10"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(ktest.BackendPort), NodePort: 30080}}},
	}
	must(c.Client.CoreV1().Services(ns).Create(c.ctx(), web, metav1.CreateOptions{}))
	must(c.Client.DiscoveryV1().EndpointSlices(ns).Create(c.ctx(), slice("web-1", "web", ktest.BackendPort, podA, podB), metav1.CreateOptions{}))
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
func (c *Cluster) createChurned(i, eps int) error {
	name := churnedName(i)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := c.Client.CoreV1().Services(ns).Create(c.ctx(), svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	s := slice(name+"-1", name, 8080, c.fakeEndpoints(i, eps)...)
	if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(c.ctx(), s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create endpointslice %s: %w", s.Name, err)
	}
	return nil
}

// fakeEndpoints are n addresses of churned service i, in 10.128.0.0/9
// (outside the cluster CIDR: nothing answers on them), unique per service
// up to 32,000 services.
func (c *Cluster) fakeEndpoints(i, n int) []string {
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

// ChurnOnce changes one random churned service: its endpoints, its port,
// its externalIPs (node addresses included) or its session affinity.
func (c *Cluster) ChurnOnce() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.Rng.IntN(c.n)
	name := churnedName(i)
	switch c.Rng.IntN(4) {
	case 0:
		s := slice(name+"-1", name, 8080, c.fakeEndpoints(i, c.Rng.IntN(5))...)
		old, err := c.Client.DiscoveryV1().EndpointSlices(ns).Get(c.ctx(), s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		old.Endpoints = s.Endpoints
		_, err = c.Client.DiscoveryV1().EndpointSlices(ns).Update(c.ctx(), old, metav1.UpdateOptions{})
		return err
	}
	svc, err := c.Client.CoreV1().Services(ns).Get(c.ctx(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	switch c.Rng.IntN(3) {
	case 0:
		svc.Spec.Ports[0].Port = int32(80 + c.Rng.IntN(3))
	case 1:
		svc.Spec.ExternalIPs = nil
		if c.Rng.IntN(2) == 0 {
			svc.Spec.ExternalIPs = []string{externalIP(i), hostileIPs[c.Rng.IntN(len(hostileIPs))]}
		}
	case 2:
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
		} else {
			svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}
	}
	_, err = c.Client.CoreV1().Services(ns).Update(c.ctx(), svc, metav1.UpdateOptions{})
	return err
}

// dump writes every Service, EndpointSlice and Node as one List file for
// `ipvs-proxy plan -f`.
func (c *Cluster) dump(path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return planinput.Write(c.ctx(), c.Client, path)
}

// Env runs the proxy in the node namespace and compares the kernel with
// `ipvs-proxy plan`.
type Env struct {
	t        *testing.T
	Node     *ktest.Node
	bin      string
	kc       string
	dir      string
	Runs     int
	stateDir string
	// WebAddr is the steady service's ClusterIP:80, which every plan has.
	WebAddr string
	// took is what each command of the last kernel read took.
	took strings.Builder
	// Profiling serves /debug/pprof/ beside /metrics (--profiling).
	Profiling bool
	// ConvergeTimeout bounds one convergence (the package's when 0).
	ConvergeTimeout time.Duration
	// SyncPeriod is the proxy's --sync-period (the package's when 0).
	SyncPeriod time.Duration
	// LastDiff is, after a convergence, the last difference it saw before
	// the kernel equalled the plan ("" when it did at once).
	LastDiff string
}

// Start runs one more `ipvs-proxy run` in the node namespace, its log
// numbered by the run.
func (e *Env) Start() *ktest.Process {
	e.Runs++
	flags := []string{"--min-sync-period", "0"}
	if e.Profiling {
		flags = append(flags, "--profiling")
	}
	return harness.StartProxy(e.t, e.Node.NS, harness.Proxy{Bin: e.bin, Kubeconfig: e.kc, Node: thisNode,
		ClusterCIDR: clusterCIDR, SyncPeriod: cmp.Or(e.SyncPeriod, SyncPeriod), StateDir: e.stateDir,
		Log: filepath.Join(e.dir, fmt.Sprintf("proxy-%03d.log", e.Runs)), NoHealthz: true, LogFormat: "json", Flags: flags})
}

// Kill sends SIGKILL and reaps the process.
func Kill(t *testing.T, p *ktest.Process) {
	t.Helper()
	if err := p.Kill(10 * time.Second); err != nil {
		t.Fatalf("proxy: %v", err)
	}
}
