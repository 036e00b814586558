//go:build kernel

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

const thisNode = "n1"

var (
	podA      = []string{"10.244.0.2", "fd00:10:244::2"}
	podB      = []string{"10.244.0.3", "fd00:10:244::3"}
	podClient = []string{"10.244.0.9", "fd00:10:244::9"}
	lanClient = []string{"198.51.100.20", "2001:db8:100::20"}
	otherNode = []netip.Addr{netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8:100::2")}
	thirdNode = []netip.Addr{netip.MustParseAddr("198.51.100.3")}
	podCIDRs  = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}

	// hostileIPs are externalIPs and LoadBalancer IPs no proxy may bind:
	// node addresses (this node's and others'), the pods' gateway, loopback,
	// the metadata service, a pod, multicast, an IPv4-mapped node address,
	// and a steady service's ClusterIP (a duplicate virtual server).
	hostileIPs = []string{
		"198.51.100.1", "198.51.100.2", "198.51.100.3", "2001:db8:100::1", "2001:db8:100::2", "169.254.1.1",
		"127.0.0.1", "169.254.169.254", "0.0.0.0", "10.244.0.2", "224.0.0.1", "::ffff:198.51.100.1", "10.96.0.10",
	}
)

// target is one request the traffic generator sends again and again.
type target struct {
	name  string
	from  *ktest.NS
	proto ktest.Proto
	addr  string
}

// env reads an integer or duration setting from the environment.
func env[T int | time.Duration](t *testing.T, key string, def T) T {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	var out any
	var err error
	switch any(def).(type) {
	case int:
		out, err = strconv.Atoi(v)
	case time.Duration:
		out, err = time.ParseDuration(v)
	}
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return out.(T)
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// steady are the services the traffic goes to; churn never touches them.
func steady() []model.ServicePort {
	web := model.ServicePort{
		Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "steady", Name: "web"}}, Protocol: model.TCP, Port: 80, NodePort: 30080,
		ClusterIPs: []netip.Addr{addr("10.96.0.10"), addr("fd00:96::10")}, ExternalIPs: []netip.Addr{addr("203.0.113.10")},
	}
	dns := model.ServicePort{
		Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "steady", Name: "dns"}}, Protocol: model.UDP, Port: 53,
		ClusterIPs: []netip.Addr{addr("10.96.0.11")},
	}
	return []model.ServicePort{web, dns}
}

func backends(pods ...[]string) []model.Endpoint {
	var out []model.Endpoint
	for _, p := range pods {
		for _, a := range p {
			out = append(out, model.Endpoint{Address: addr(a), Port: ktest.BackendPort, NodeName: thisNode, Ready: true, Serving: true})
		}
	}
	return out
}

// churner owns the churned part of the cluster and mutates it.
type churner struct {
	rng      *rand.Rand
	svcs     map[int]*model.ServicePort
	eps      map[int][]model.Endpoint
	deleted  map[int]bool
	n        int
	protoCnt map[model.Protocol]int
}

func churnName(i int) model.ServicePortName {
	return model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "churn", Name: fmt.Sprintf("s%05d", i)}}
}

func newChurner(n int, seed uint64) *churner {
	c := &churner{rng: rand.New(rand.NewPCG(seed, 7)), svcs: map[int]*model.ServicePort{}, eps: map[int][]model.Endpoint{}, deleted: map[int]bool{}, n: n}
	for i := range n {
		c.create(i)
	}
	return c
}

func (c *churner) create(i int) {
	sp := &model.ServicePort{
		Name: churnName(i), Protocol: model.TCP, Port: 80,
		ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 100, byte(i / 250), byte(i%250 + 1)})},
	}
	if i%4 == 0 {
		sp.ClusterIPs = append(sp.ClusterIPs, netip.MustParseAddr(fmt.Sprintf("fd00:100::%x", i+1)))
	}
	c.svcs[i] = sp
	c.scale(i, 1+i%3)
	delete(c.deleted, i)
}

// scale gives service i n endpoints per family: addresses of pods that
// do not exist (no traffic goes there), on this node and others.
func (c *churner) scale(i, n int) {
	sp := c.svcs[i]
	var es []model.Endpoint
	for k := range n {
		j := (i*7 + k) % 60000
		node := []string{thisNode, "n2", "n3"}[k%3]
		es = append(es, model.Endpoint{Address: netip.AddrFrom4([4]byte{10, 244, byte(100 + j/250), byte(j%250 + 1)}), Port: 8080,
			NodeName: node, Ready: c.rng.IntN(10) != 0, Serving: true, Terminating: c.rng.IntN(20) == 0})
		if len(sp.ClusterIPs) == 2 {
			es = append(es, model.Endpoint{Address: netip.MustParseAddr(fmt.Sprintf("fd00:10:244:1::%x", j+1)), Port: 8080, NodeName: node, Ready: true, Serving: true})
		}
	}
	c.eps[i] = es
}

func (c *churner) externalIP() netip.Addr {
	if c.rng.IntN(2) == 0 {
		return netip.MustParseAddr(hostileIPs[c.rng.IntN(len(hostileIPs))])
	}
	if c.rng.IntN(4) == 0 {
		return netip.MustParseAddr(fmt.Sprintf("2001:db8:203::%x", 100+c.rng.IntN(150)))
	}
	return netip.AddrFrom4([4]byte{203, 0, 113, byte(100 + c.rng.IntN(150))})
}

// mutate changes one random service in one random way and returns it.
func (c *churner) mutate() types.NamespacedName {
	i := c.rng.IntN(c.n)
	if c.deleted[i] {
		c.create(i)
		return churnName(i).NamespacedName
	}
	sp := c.svcs[i]
	switch c.rng.IntN(11) {
	case 0, 1:
		c.scale(i, c.rng.IntN(7))
	case 2:
		sp.Port = uint16(1 + c.rng.IntN(65535))
		for k := range c.eps[i] {
			c.eps[i][k].Port = uint16(1 + c.rng.IntN(65535))
		}
	case 3:
		sp.ExternalPolicyLocal = !sp.ExternalPolicyLocal
		sp.InternalPolicyLocal = c.rng.IntN(2) == 0
	case 4:
		sp.AffinityTimeout = []uint32{0, 0, 10800, uint32(1 + c.rng.IntN(86400))}[c.rng.IntN(4)]
	case 5:
		sp.ExternalIPs = nil
		for k := c.rng.IntN(4); k > 0; k-- {
			if a := c.externalIP(); !slices.Contains(sp.ExternalIPs, a) {
				sp.ExternalIPs = append(sp.ExternalIPs, a)
			}
		}
	case 6:
		sp.NodePort = []uint16{0, uint16(31000 + c.rng.IntN(1700))}[c.rng.IntN(2)]
	case 7:
		sp.Scheduler = []string{"", "rr", "lc", "sh", "mh", "wrr"}[c.rng.IntN(6)]
	case 8:
		sp.Protocol = []model.Protocol{model.TCP, model.UDP, model.SCTP}[c.rng.IntN(3)]
	case 9:
		sp.LoadBalancerIPs, sp.LoadBalancerSourceRanges = nil, nil
		if c.rng.IntN(2) == 0 {
			sp.LoadBalancerIPs = []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, byte(1 + c.rng.IntN(250))})}
			if c.rng.IntN(3) == 0 {
				sp.LoadBalancerIPs = []netip.Addr{c.externalIP()}
			}
			sp.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
		}
	case 10:
		delete(c.svcs, i)
		delete(c.eps, i)
		c.deleted[i] = true
	}
	return churnName(i).NamespacedName
}

func (c *churner) cluster() model.Cluster {
	cl := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}}
	st := steady()
	cl.Services = append(cl.Services, st...)
	cl.Endpoints[st[0].Name] = backends(podA, podB)
	cl.Endpoints[st[1].Name] = backends(podA[:1], podB[:1])
	for i, sp := range c.svcs {
		s := *sp
		cl.Services = append(cl.Services, s)
		cl.Endpoints[s.Name] = slices.Clone(c.eps[i])
	}
	sort.Slice(cl.Services, func(a, b int) bool { return cl.Services[a].Name.String() < cl.Services[b].Name.String() })
	cl.Nodes = []model.Node{
		{Name: thisNode, Addresses: []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6}},
		{Name: "n2", Addresses: otherNode},
		{Name: "n3", Addresses: thirdNode},
	}
	return cl
}

// proxy is the proxy's kernel side, opened inside the node namespace.
type proxy struct {
	table *ipvskernel.Table
	nl    *netlink.Handle
	link  *addrkernel.Link
	app   *applier.Applier
}

func openProxy(t *testing.T, node *ktest.Node, g *guard.Guard) *proxy {
	t.Helper()
	p := &proxy{}
	var (
		ct    *ipvskernel.Conntrack
		rules *iptables.Syncer
	)
	err := node.Do(func() error {
		rel, err := ipvskernel.Release()
		if err != nil {
			return err
		}
		if _, err := ipvskernel.WriteSysctls("/proc/sys", ipvs.KernelSysctls(rel, false)); err != nil {
			return err
		}
		if p.table, err = ipvskernel.Open(); err != nil {
			return err
		}
		if ct, err = ipvskernel.OpenConntrack(); err != nil {
			return err
		}
		if p.nl, err = netlink.NewHandle(); err != nil {
			return err
		}
		if p.link, err = addrkernel.EnsureDevice(p.nl); err != nil {
			return err
		}
		rules, err = iptableskernel.NewSyncer(nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.table.Close(); ct.Close(); p.nl.Close(); rules.Close() })
	rec := ipvs.NewReconciler(p.table, ipvs.Options{Conntrack: ct})
	p.app = applier.New(rec, addrmgr.NewManager(p.link, g, nil), rules, nil)
	return p
}

// findings collects invariant violations, capped.
type findings struct {
	mu    sync.Mutex
	n     int
	items []string
}

func (f *findings) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(f.items) < 40 {
		f.items = append(f.items, fmt.Sprintf(format, args...))
	}
}

// check compares the kernel with the plan: the same virtual servers with the
// same scheduler, flags and persistence; every planned real server at its
// weight (a real server the plan dropped may stay at weight 0 while it
// drains: graceful termination); kube-ipvs0 holds exactly the planned
// addresses, none of them protected.
func check(node *ktest.Node, p *proxy, st *planner.State, g *guard.Guard, f *findings, when string) {
	var kernel []ipvs.VirtualServer
	var bound []netip.Prefix
	err := node.Do(func() error {
		var err error
		if kernel, err = p.table.Services(); err != nil {
			return err
		}
		bound, err = p.link.Addrs()
		return err
	})
	if err != nil {
		f.add("%s: read kernel: %v", when, err)
		return
	}
	have := make(map[ipvs.Key]*ipvs.VirtualServer, len(kernel))
	for i := range kernel {
		have[kernel[i].Key] = &kernel[i]
	}
	for i := range st.VirtualServers {
		want := &st.VirtualServers[i]
		got, ok := have[want.Key]
		if !ok {
			f.add("%s: virtual server %v (%s) missing", when, want.Key, want.Service)
			continue
		}
		delete(have, want.Key)
		if got.Scheduler != want.Scheduler || got.Flags&^ipvs.FlagHashed != want.Flags&^ipvs.FlagHashed || got.PersistenceTimeout != want.PersistenceTimeout {
			f.add("%s: virtual server %v: kernel %s/%#x/%d, plan %s/%#x/%d", when, want.Key, got.Scheduler, got.Flags, got.PersistenceTimeout, want.Scheduler, want.Flags, want.PersistenceTimeout)
		}
		rs := make(map[netip.AddrPort]int32, len(got.RealServers))
		for _, r := range got.RealServers {
			rs[netip.AddrPortFrom(r.Address, r.Port)] = r.Weight
		}
		for _, r := range want.RealServers {
			ap := netip.AddrPortFrom(r.Address, r.Port)
			w, ok := rs[ap]
			if !ok || w != r.Weight {
				f.add("%s: %v real server %v: kernel weight %d (present %v), plan %d", when, want.Key, ap, w, ok, r.Weight)
			}
			delete(rs, ap)
		}
		for ap, w := range rs {
			if w != 0 {
				f.add("%s: %v real server %v not planned but weight %d", when, want.Key, ap, w)
			}
		}
	}
	for k := range have {
		f.add("%s: virtual server %v leaked", when, k)
	}
	wantAddrs := map[netip.Prefix]bool{}
	for _, a := range st.Addresses {
		wantAddrs[a] = true
	}
	for _, pre := range bound {
		if v := g.Check(pre.Addr()); v.Protected {
			f.add("%s: protected address %v bound on kube-ipvs0 (%s)", when, pre, v.Reason)
		}
		if !wantAddrs[pre] {
			f.add("%s: address %v on kube-ipvs0 not planned", when, pre)
		}
		delete(wantAddrs, pre)
	}
	for a := range wantAddrs {
		f.add("%s: planned address %v not on kube-ipvs0", when, a)
	}
}

// watchAddrs reports every protected address that appears on kube-ipvs0,
// however briefly, until ctx ends.
func watchAddrs(ctx context.Context, t *testing.T, node *ktest.Node, link int, g *guard.Guard, f *findings) (wait func()) {
	ch := make(chan netlink.AddrUpdate, 1<<16)
	done := make(chan struct{})
	// A closed subscription (at the end) reports an error: only errors
	// while the soak runs are findings, since the monitor then stops.
	onErr := func(err error) {
		if ctx.Err() == nil {
			f.add("address monitor stopped: %v", err)
		}
	}
	err := netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{Namespace: ptr(node.Handle()), ErrorCallback: onErr,
		ReceiveBufferSize: 16 << 20, ReceiveBufferForceSize: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				close(done)
				return
			case u := <-ch:
				if !u.NewAddr || u.LinkIndex != link {
					continue
				}
				a, ok := netip.AddrFromSlice(u.LinkAddress.IP)
				if !ok {
					continue
				}
				if u.LinkAddress.IP.To4() != nil {
					a = a.Unmap()
				}
				if a.Is6() && a.IsLinkLocalUnicast() {
					continue
				}
				if v := g.Check(a); v.Protected {
					f.add("monitor: protected address %v appeared on kube-ipvs0 (%s)", a, v.Reason)
				}
			}
		}
	}()
	return wg.Wait
}

func ptr[T any](v T) *T { return &v }

// traffic sends requests round-robin to the targets until ctx ends.
type traffic struct {
	mu     sync.Mutex
	ok     map[string]int
	failed map[string]int
	errs   []string
	lat    []time.Duration
}

func runTraffic(ctx context.Context, targets []target) (*traffic, func()) {
	tr := &traffic{ok: map[string]int{}, failed: map[string]int{}}
	var wg sync.WaitGroup
	for _, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				out, err := tg.from.Request(tg.proto, tg.addr)
				d := time.Since(start)
				tr.mu.Lock()
				if err == nil && (strings.HasPrefix(out, "pod-a ") || strings.HasPrefix(out, "pod-b ")) {
					tr.ok[tg.name]++
					tr.lat = append(tr.lat, d)
				} else if ctx.Err() == nil {
					tr.failed[tg.name]++
					if len(tr.errs) < 20 {
						tr.errs = append(tr.errs, fmt.Sprintf("%s: %q %v", tg.name, out, err))
					}
				}
				tr.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return tr, wg.Wait
}

type memSample struct {
	at         time.Duration
	heap, sys  uint64
	goroutines int
	services   int
}

func sampleMem(at time.Duration, services int) memSample {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSample{at: at, heap: m.HeapAlloc, sys: m.Sys, goroutines: runtime.NumGoroutine(), services: services}
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func latRow(name string, ds []time.Duration) string {
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("| %s | %d | %s | %s | %s | %s |", name, len(ds), r(pct(ds, 0.5)), r(pct(ds, 0.9)), r(pct(ds, 0.99)), r(pct(ds, 1)))
}

func mib(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// TestSoak churns the cluster for SOAK_DURATION with traffic flowing to
// the steady services, checking the invariants after every sync.
func TestSoak(t *testing.T) {
	duration := env(t, "SOAK_DURATION", 20*time.Second)
	nsvc := env(t, "SOAK_SERVICES", 10000)
	seed := env(t, "SOAK_SEED", 1)
	fullEvery := env(t, "SOAK_FULL_EVERY", 10)
	maxChanges := env(t, "SOAK_CHANGES", 20)
	// TCG under load answers slowly: a request fails when it gets no right
	// answer within this time, not when it is merely slow.
	ktest.RequestTimeout = env(t, "SOAK_REQUEST_TIMEOUT", 10*time.Second)

	node := ktest.NewNode(t)
	node.AddPod(t, "pod-a", podA...)
	node.AddPod(t, "pod-b", podB...)
	pc := node.AddPod(t, "client", podClient...)
	lan := node.AddClient(t, "lan", lanClient...)

	opts := planner.Options{
		NodeName:      thisNode,
		LocalAddrs:    []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6, ktest.PodGatewayV4, ktest.PodGatewayV6},
		Scheduler:     "rr",
		ClusterCIDRs:  podCIDRs,
		MasqueradeBit: planner.DefaultMasqueradeBit,
	}
	ch := newChurner(nsvc, uint64(seed))
	g := guard.New(guard.Inputs{LocalAddrs: opts.LocalAddrs, Nodes: ch.cluster().Nodes, PodCIDRs: podCIDRs})
	p := openProxy(t, node, g)
	nodeAddrs := []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6}
	f := &findings{}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitMon := watchAddrs(ctx, t, node, p.link.Index(), g, f)

	var planLat, fullLat, partialLat, checkLat []time.Duration
	var mem []memSample
	begin := time.Now()
	apply := func(full bool, changed []types.NamespacedName) *planner.State {
		t0 := time.Now()
		st := planner.Plan(ch.cluster(), opts)
		planLat = append(planLat, time.Since(t0))
		var res *applier.Result
		t1 := time.Now()
		err := node.Do(func() error {
			var err error
			if full {
				res, err = p.app.Full(&st, nodeAddrs)
			} else {
				res, err = p.app.Partial(&st, changed...)
			}
			return err
		})
		d := time.Since(t1)
		if full {
			fullLat = append(fullLat, d)
		} else {
			partialLat = append(partialLat, d)
		}
		if err != nil {
			f.add("sync (full=%v): %v", full, err)
		} else if err := res.Err(); err != nil {
			f.add("sync (full=%v) failed services %v: %v", full, res.FailedServices(), err)
		}
		t2 := time.Now()
		check(node, p, &st, g, f, fmt.Sprintf("after sync %d", len(planLat)))
		checkLat = append(checkLat, time.Since(t2))
		return &st
	}

	st := apply(true, nil)
	t.Logf("initial full sync: %d virtual servers, %d addresses, %d refusals in %v", len(st.VirtualServers), len(st.Addresses), len(st.Refusals), fullLat[0])
	if len(st.VirtualServers) < nsvc {
		t.Fatalf("only %d virtual servers for %d services", len(st.VirtualServers), nsvc)
	}
	runtime.GC()
	debug.FreeOSMemory()
	base := sampleMem(time.Since(begin), len(ch.svcs))
	mem = append(mem, base)

	// Traffic must work before churn starts; afterwards it must never fail.
	for _, tg := range []target{{"web-v4", pc.NS, ktest.TCP, "10.96.0.10:80"}} {
		if _, err := tg.from.Request(tg.proto, tg.addr); err != nil {
			t.Fatalf("traffic before churn: %v", err)
		}
	}
	targets := []target{
		{"clusterip-v4-tcp", pc.NS, ktest.TCP, "10.96.0.10:80"},
		{"clusterip-v6-tcp", pc.NS, ktest.TCP, "[fd00:96::10]:80"},
		{"clusterip-v4-udp", pc.NS, ktest.UDP, "10.96.0.11:53"},
		{"nodeport-v4-tcp", lan.NS, ktest.TCP, "198.51.100.1:30080"},
		{"externalip-v4-tcp", lan.NS, ktest.TCP, "203.0.113.10:80"},
	}
	tctx, stopTraffic := context.WithCancel(ctx)
	tr, waitTraffic := runTraffic(tctx, targets)

	syncs, changes := 0, 0
	churnStart := time.Now()
	for time.Since(churnStart) < duration {
		syncs++
		var changed []types.NamespacedName
		for k := 1 + ch.rng.IntN(maxChanges); k > 0; k-- {
			changed = append(changed, ch.mutate())
		}
		changes += len(changed)
		full := syncs%fullEvery == 0
		apply(full, changed)
		if syncs%5 == 0 {
			mem = append(mem, sampleMem(time.Since(begin), len(ch.svcs)))
		}
	}
	stopTraffic()
	waitTraffic()

	// Back to the initial cluster: memory and goroutines must return to the
	// baseline taken after the first sync of the same cluster.
	ch = newChurner(nsvc, uint64(seed))
	apply(true, nil)
	var after memSample
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		debug.FreeOSMemory()
		after = sampleMem(time.Since(begin), len(ch.svcs))
		if after.goroutines <= base.goroutines || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	mem = append(mem, after)
	cancel()
	waitMon()

	var b strings.Builder
	fmt.Fprintf(&b, "SOAK-REPORT-BEGIN\n")
	fmt.Fprintf(&b, "services %d, seed %d, churn %v, %d syncs (%d full), %d service changes, full resync every %d syncs, request timeout %v\n",
		nsvc, seed, duration, syncs, syncs/fullEvery, changes, fullEvery, ktest.RequestTimeout)
	fmt.Fprintf(&b, "\n| request target | ok | failed |\n|---|---|---|\n")
	totalFail := 0
	for _, tg := range targets {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", tg.name, tr.ok[tg.name], tr.failed[tg.name])
		totalFail += tr.failed[tg.name]
	}
	fmt.Fprintf(&b, "\n| latency | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n")
	for _, r := range []struct {
		n string
		d []time.Duration
	}{{"plan (whole cluster)", planLat}, {"partial sync (apply)", partialLat}, {"full sync (apply)", fullLat}, {"invariant check (dump + compare)", checkLat}, {"request (steady services)", tr.lat}} {
		fmt.Fprintln(&b, latRow(r.n, r.d))
	}
	fmt.Fprintf(&b, "\n| t | services | heap MiB | sys MiB | goroutines |\n|---|---|---|---|---|\n")
	step := max(1, len(mem)/12)
	for i, m := range mem {
		if i%step == 0 || i == len(mem)-1 {
			fmt.Fprintf(&b, "| %v | %d | %s | %s | %d |\n", m.at.Round(time.Second), m.services, mib(m.heap), mib(m.sys), m.goroutines)
		}
	}
	fmt.Fprintf(&b, "\ninvariant findings: %d\n", f.n)
	for _, s := range f.items {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	for _, s := range tr.errs {
		fmt.Fprintf(&b, "  request error: %s\n", s)
	}
	fmt.Fprintf(&b, "baseline heap %s MiB, %d goroutines; after churn and reset heap %s MiB, %d goroutines\n",
		mib(base.heap), base.goroutines, mib(after.heap), after.goroutines)
	fmt.Fprintf(&b, "SOAK-REPORT-END\n")
	t.Log("\n" + b.String())

	if f.n > 0 {
		t.Errorf("%d invariant findings", f.n)
	}
	if totalFail > 0 {
		t.Errorf("%d failed requests to services that never changed", totalFail)
	}
	if after.goroutines > base.goroutines {
		t.Errorf("goroutines did not return to baseline: %d, baseline %d", after.goroutines, base.goroutines)
	}
	if limit := base.heap + base.heap/4 + 8<<20; after.heap > limit {
		t.Errorf("heap did not return to baseline: %s MiB, baseline %s MiB", mib(after.heap), mib(base.heap))
	}
}
