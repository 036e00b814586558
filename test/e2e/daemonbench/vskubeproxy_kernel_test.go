//go:build kernel

package daemonbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/ipvs"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// contender is one proxy under test: how to start it in a node namespace
// and which gauge of its /metrics holds the Unix time its last complete
// sync ended.
type contender struct {
	// key names it in BENCHVS_PROXIES.
	key        string
	name       string
	syncMetric string
	// durMetric is the histogram of its syncs' durations.
	durMetric string
	// kubeconfig holds its credentials (credentialsAccepted).
	kubeconfig string
	start      func(t *testing.T, node *ktest.Node) process
}

// process is a started proxy; *kubeproxy.Process is one.
type process interface {
	Pid() int
	Alive() bool
	Stop(timeout time.Duration) (time.Duration, error)
}

// settleEvery is how often the harness looks, between two changes, for
// the sync of the first to have ended.
const settleEvery = 300 * time.Millisecond

// progressEvery is how often the harness shows ipvs-proxy's last log
// lines while its first sync is not complete.
const progressEvery = 5 * time.Minute

// ipvsProxy is `ipvs-proxy run` started with its defaults but for the
// node's identity and the addresses kube-proxy uses too.
type ipvsProxy struct{ *ktest.Process }

// With debug, it logs at debug level: each sync's stages (the breakdown);
// with memoryOn, it traces its collections and serves its profiles; with
// BENCHVS_GOGC, it runs with that GOGC instead of its own default; with
// stats (true or false), with that --service-stats.
func startIPVSProxy(t *testing.T, node *ktest.Node, bin, kubeconfig string, debug bool, stats string) process {
	t.Helper()
	p := harness.Proxy{Bin: bin, Kubeconfig: kubeconfig, Node: thisNode,
		// The proxy's own default period, not the harness' short one.
		SyncPeriod:  config.DefaultSyncPeriod,
		HealthzAddr: kubeproxy.HealthzAddress, MetricsAddr: kubeproxy.MetricsAddress,
		LogLevel: "info", LogFormat: "json"}
	if debug {
		p.LogLevel = "debug"
	}
	if stats != "" {
		p.Flags = append(p.Flags, "--service-stats="+stats)
	}
	if memoryOn() {
		p.Env = append(p.Env, "GODEBUG=gctrace=1")
		p.Flags = append(p.Flags, "--profiling")
	}
	if v := os.Getenv("BENCHVS_GOGC"); v != "" {
		p.Env = append(p.Env, "GOGC="+v)
	}
	return ipvsProxy{harness.StartProxy(t, node.NS, p)}
}

func (p ipvsProxy) Pid() int { return p.Cmd.Process.Pid }

// lastSync is the contender's sync gauge, zero before its first complete
// sync.
func lastSync(node *ktest.Node, metric string) (time.Time, error) {
	code, body, err := node.HTTPGet(kubeproxy.MetricsAddress, "/metrics", 30*time.Second)
	if err != nil {
		return time.Time{}, err
	}
	if code != 200 {
		return time.Time{}, fmt.Errorf("/metrics: status %d", code)
	}
	m, err := kubeproxy.ParseMetrics(body)
	if err != nil {
		return time.Time{}, err
	}
	if v := m[metric]; v > 0 {
		return time.Unix(0, int64(v*1e9)), nil
	}
	return time.Time{}, nil
}

// syncStats sums the _count and _sum series of histogram name over all
// its labels.
func syncStats(node *ktest.Node, name string) (n int, sum time.Duration) {
	code, body, err := node.HTTPGet(kubeproxy.MetricsAddress, "/metrics", 30*time.Second)
	if err != nil || code != 200 {
		return 0, 0
	}
	m, err := kubeproxy.ParseMetrics(body)
	if err != nil {
		return 0, 0
	}
	var s float64
	for k, v := range m {
		switch {
		case strings.HasPrefix(k, name+"_count"):
			n += int(v)
		case strings.HasPrefix(k, name+"_sum"):
			s += v
		}
	}
	return n, time.Duration(s * float64(time.Second))
}

// cpuTime is utime + stime + cutime + cstime of /proc/PID/stat: the
// process's CPU and that of the children it waited for (iptables-save,
// iptables-restore, ipset ... that either proxy runs).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which ends at the last ')': state is
	// field 3, utime to cstime 14 to 17.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ticks := 0
	for _, v := range f[11:15] {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("/proc/%d/stat: %q", pid, b)
		}
		ticks += n
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ticks) * time.Second / clkTck
}

// vsResult is what one contender measured.
type vsResult struct {
	name       string
	kubeProxy  bool          // the result is kube-proxy's, the side-by-side's reference
	fullSync   time.Duration // process start -> complete kernel
	overBudget bool          // fullSync is the budget: it did not finish
	// changeOverBudget: the contender was over its first-sync budget, so
	// one change alone was written, and it was not in the kernel within
	// the change budget, which lat holds as a lower bound.
	changeOverBudget bool
	verifyTook       time.Duration
	hwmAfterFull     int // KiB
	hwm              int // KiB
	idleCPU          time.Duration
	idle             time.Duration
	changeCPU        time.Duration
	changeWall       time.Duration
	lat, floor       []time.Duration // sorted
	// answered is each write's round trip (the API server's answer), in
	// the changes' order.
	answered []time.Duration
	// breakdown is ipvs-proxy's one change stage by stage
	// (BENCHVS_BREAKDOWN=1), empty otherwise.
	breakdown string
	// startup is when ipvs-proxy logged each step of its start
	// (startupTimeline); empty for kube-proxy.
	startup string
	// critical is when the kernel served ipvs-proxy's critical Services
	// after its caches synced (criticalFigure); empty for kube-proxy.
	critical string
	// memory is ipvs-proxy's RSS and collector figures (BENCHVS_MEMORY).
	memory string
	kernel string
	// The contender's own sync histogram: at the first sync, and over
	// the changes.
	firstSyncs, changeSyncs     int
	firstSyncSum, changeSyncSum time.Duration
}

func TestVsKubeProxyGuest(t *testing.T) {
	ctx := context.Background()
	services := envInt(t, "DAEMONBENCH_SERVICES", 1000)
	endpoints := envInt(t, "DAEMONBENCH_ENDPOINTS", 10)
	changes := envInt(t, "BENCHVS_CHANGES", 50)
	run := envIntZero(t, "BENCHVS_RUN") // index of the size in the run, from 0
	budget := envDuration(t, "BENCHVS_BUDGET", 15*time.Minute)
	idle := envDuration(t, "BENCHVS_IDLE", 60*time.Second)
	changeBudget := envDuration(t, "BENCHVS_CHANGE_BUDGET", 10*time.Minute)
	changesWall := envDuration(t, "BENCHVS_CHANGES_WALL", 24*time.Hour)
	adminCfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "DAEMONBENCH_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	adminCfg.QPS, adminCfg.Burst = -1, 0
	client := kubernetes.NewForConfigOrDie(adminCfg)
	_, apiPort, err := net.SplitHostPort(strings.TrimPrefix(adminCfg.Host, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	kpBin, proxyBin := vmtest.GuestEnv(t, "KUBE_PROXY_BIN"), vmtest.GuestEnv(t, "DAEMONBENCH_PROXY_BIN")
	kpConfig, kpKC := filepath.Join(t.TempDir(), "config.conf"), vmtest.GuestEnv(t, "BENCHVS_KUBECONFIG_KUBE_PROXY")
	if err := (kubeproxy.Config{Kubeconfig: kpKC, ClusterCIDR: "10.244.0.0/16"}).WriteFile(kpConfig); err != nil {
		t.Fatal(err)
	}
	proxyKC := vmtest.GuestEnv(t, "DAEMONBENCH_KUBECONFIG_PROXY")
	breakdown := os.Getenv("BENCHVS_BREAKDOWN") == "1"
	contenders := []contender{
		{key: "kube-proxy", name: "kube-proxy " + kubeproxy.Version + " (ipvs)", syncMetric: kubeproxy.LastSyncMetric + `{ip_family="IPv4"}`,
			durMetric:  "kubeproxy_sync_proxy_rules_duration_seconds",
			kubeconfig: kpKC,
			start: func(t *testing.T, node *ktest.Node) process {
				return kubeproxy.Start(t, node.NS, kubeproxy.Options{Bin: kpBin, NodeName: thisNode, ConfigFile: kpConfig})
			}},
	}
	// BENCHVS_SERVICE_STATS=false,true measures ours twice against the
	// same Services: statistics off, then on.
	for _, stats := range envStats(t) {
		name := "ipvs-proxy run"
		if stats != "" {
			name += " --service-stats=" + stats
		}
		contenders = append(contenders, contender{key: "ipvs-proxy", name: name, syncMetric: "ipvs_proxy_last_sync_timestamp_seconds",
			durMetric:  "ipvs_proxy_sync_duration_seconds",
			kubeconfig: proxyKC,
			start: func(t *testing.T, node *ktest.Node) process {
				return startIPVSProxy(t, node, proxyBin, proxyKC, breakdown, stats)
			}})
	}
	which := envProxies(t)
	warmKernel(t, kpBin, proxyBin)
	var results []vsResult
	for i, c := range contenders {
		if !which[c.key] {
			continue
		}
		b := &vsBench{t: t, ctx: ctx, client: client, adminCfg: adminCfg, apiPort: apiPort, services: services,
			changes: changes, changesWall: changesWall, budget: budget, changeBudget: changeBudget, idle: idle, ipBase: 250 * (len(contenders)*run + i), breakdown: breakdown}
		results = append(results, b.measure(c))
	}
	fmt.Print(vsReport(services, endpoints, changes, results))
}

// vsBench measures one contender in a fresh node namespace.
type vsBench struct {
	t        *testing.T
	ctx      context.Context
	client   kubernetes.Interface
	adminCfg *rest.Config
	apiPort  string
	services int
	changes  int
	budget   time.Duration
	// changeBudget caps the wait for one change; past it, a contender
	// over its first-sync budget has the cap as a lower bound, ours fails.
	changeBudget time.Duration
	// changesWall ends the changes early: no change is begun
	// once they have taken it, so a proxy whose every change waits out a
	// minutes-long sync is timed over fewer changes (reported with their
	// number).
	changesWall time.Duration
	idle        time.Duration
	ipBase      int // the first changeIP index of this contender's changes
	// breakdown: ipvs-proxy runs at debug level and its one change is
	// reported stage by stage.
	breakdown bool
}

func (b *vsBench) measure(c contender) vsResult {
	t := b.t
	r := vsResult{name: c.name, kubeProxy: c.key == "kube-proxy"}
	want := listWanted(t, b.ctx, b.client)
	node := ktest.NewNode(t)
	node.AddClient(t, "cli")
	for x := 0; x < realPods; x++ {
		node.AddPod(t, fmt.Sprintf("pod-%d", x), podIP(x).String())
	}
	node.Relay(t, "127.0.0.1:"+b.apiPort, strings.TrimPrefix(b.adminCfg.Host, "https://"))
	defer func() {
		// The IPVS service hash is global to all namespaces: empty it
		// before the next contender.
		_, _ = node.Exec("ipvsadm", "-C")
		node.Close()
	}()

	// A proxy whose credentials are refused would never sync: fail now,
	// not after its budget.
	if err := credentialsAccepted(b.ctx, c.kubeconfig, b.adminCfg.Host); err != nil {
		t.Fatalf("%s: not started: %v", c.name, err)
	}

	// (1) First full sync: the contender's own end-of-sync gauge, then
	// the kernel compared with what it should program.
	start := time.Now()
	p := c.start(t, node)
	pid := p.Pid()
	var critical <-chan pollResult
	stopCritical := make(chan struct{})
	if _, ok := p.(ipvsProxy); ok {
		critical = watchCritical(b.ctx, b.client, node, p, stopCritical)
	}
	deadline := start.Add(b.budget)
	nextTail := start.Add(progressEvery)
	for {
		if !p.Alive() {
			t.Fatalf("%s exited during its first sync", c.name)
		}
		if ours, ok := p.(ipvsProxy); ok && time.Now().After(nextTail) {
			// A first sync this long is worth seeing from the outside:
			// the log stays in the VM.
			nextTail = nextTail.Add(progressEvery)
			t.Logf("ipvs-proxy: no complete first sync %v after start; its log's last lines:\n%s",
				time.Since(start).Round(time.Second), ours.Tail(15))
		}
		if time.Now().After(deadline) {
			r.fullSync, r.overBudget = b.budget, true
			t.Logf("%s: no complete first sync within the budget of %v: reported as > %v", c.name, b.budget, b.budget)
			break
		}
		ts, err := lastSync(node, c.syncMetric)
		if err != nil || ts.IsZero() {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		checked := time.Now()
		kernel, err := want.check(node)
		r.verifyTook = time.Since(checked)
		if err == nil {
			r.fullSync, r.kernel = ts.Sub(start), kernel
			if ts.Before(start) { // clock granularity
				r.fullSync = checked.Sub(start)
			}
			t.Logf("%s: first sync ended %v after start; kernel complete (%s), checked in %v", c.name,
				r.fullSync.Round(time.Millisecond), kernel, r.verifyTook.Round(time.Millisecond))
			break
		}
		t.Logf("%s: synced at %v but the kernel is not complete yet: %v", c.name, ts.Sub(start).Round(time.Millisecond), err)
		time.Sleep(time.Second)
	}
	r.hwmAfterFull = status(t, pid, "VmHWM")
	if ours, ok := p.(ipvsProxy); ok {
		if memoryOn() && !r.overBudget {
			heapProfile(t, node, "first")
		}
		if f, err := os.Open(ours.Log); err == nil {
			r.startup = startupTimeline(f, start)
			f.Close()
		}
		close(stopCritical)
		served := <-critical
		if served.err != nil {
			t.Logf("ipvs-proxy: default/kubernetes: %v", served.err)
		}
		if f, err := os.Open(ours.Log); err == nil {
			r.critical = criticalFigure(readCriticalLog(f), served.at)
			f.Close()
		}
		// What kept a sync before the first complete one from being it.
		for _, w := range warnings(t, ours.Log, 5) {
			t.Logf("ipvs-proxy warned before its first complete sync: %s", w)
		}
	}
	r.firstSyncs, r.firstSyncSum = syncStats(node, c.durMetric)
	if !r.overBudget {
		// (2) CPU while idle: nothing changes in the API.
		c0 := cpuTime(t, pid)
		time.Sleep(b.idle)
		r.idleCPU, r.idle = cpuTime(t, pid)-c0, b.idle
		// (3) One change at a time, the floor informer beside it.
		b.changeLoop(c, node, p, want, &r)
	} else if p.Alive() {
		// Still in its first sync: one change, to bound how long a change
		// waits for a proxy that has not caught up.
		one := *b
		one.changes = 1
		one.changeLoop(c, node, p, want, &r)
	}
	r.hwm = status(t, pid, "VmHWM")
	if ours, ok := p.(ipvsProxy); ok && memoryOn() && p.Alive() {
		heapProfile(t, node, "end")
		r.memory = memoryReport(t, pid, ours.Log) + largestLiveHeap(t, node, sampleFor)
	}
	if _, err := p.Stop(2 * time.Minute); err != nil {
		t.Logf("%s stop: %v", c.name, err)
	}
	return r
}

// changeLoop makes b.changes EndpointSlice updates, one at a time, each
// replacing the first endpoint of one slice. Each one's latency runs
// from just before the API write to the first IPVS_CMD_GET_DEST poll
// (every vsPollEvery, from before the write on, beside it) that shows the
// new real server; the floor is when
// the bare informer in the same namespace received the update. The next
// change waits until the contender's sync gauge passes the write.
func (b *vsBench) changeLoop(c contender, node *ktest.Node, p process, want *wanted, r *vsResult) {
	t := b.t
	fl := startFloor(t, node, b.adminCfg, b.apiPort)
	defer fl.stop()
	h, err := ipvs.New(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cpu0, wall0 := cpuTime(t, p.Pid()), time.Now()
	n0, sum0 := syncStats(node, c.durMetric)
	for k := 0; k < b.changes; k++ {
		if k > 0 && time.Since(wall0) > b.changesWall {
			t.Logf("%s: %d of %d changes in %v, past BENCHVS_CHANGES_WALL=%v: no more", c.name, k, b.changes,
				time.Since(wall0).Round(time.Second), b.changesWall)
			break
		}
		i := changedService(k, b.services)
		sl, err := b.client.DiscoveryV1().EndpointSlices(benchNS).Get(b.ctx, sliceName(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := changeIP(b.ipBase + k)
		if sl.Endpoints[0].Addresses[0] == ip.String() {
			t.Fatalf("change %d: slice %s already has %s", k, sl.Name, ip)
		}
		sl.Endpoints[0].Addresses = []string{ip.String()}
		vip := want.clusterIP[serviceName(i)]
		vs := &ipvs.Service{AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_TCP,
			Address: net.IP(vip.AsSlice()), Port: servicePort}
		fl.expect(sl.Name, ip.String())
		// The poll runs from before the write, beside it: the change is
		// timed to when the kernel shows it, whenever the API server's
		// answer to the write comes back.
		seen := make(chan pollResult, 1)
		stop := make(chan struct{})
		// A proxy still in its first sync may not have the virtual
		// server yet: its absence is then not an error.
		go func() { seen <- pollDest(h, vs, ip, p, stop, r.overBudget) }()
		w := time.Now()
		// As the EndpointSlice controller sets it: the time of the change,
		// here the write's. Either proxy's network programming latency
		// runs from it.
		if sl.Annotations == nil {
			sl.Annotations = map[string]string{}
		}
		sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = w.Format(time.RFC3339Nano)
		if _, err := b.client.DiscoveryV1().EndpointSlices(benchNS).Update(b.ctx, sl, metav1.UpdateOptions{}); err != nil {
			close(stop)
			t.Fatal(err)
		}
		r.answered = append(r.answered, time.Since(w))
		deadline := w.Add(b.changeBudget)
		var got pollResult
		timedOut := false
		select {
		case got = <-seen:
		case <-time.After(b.changeBudget):
			close(stop)
			got, timedOut = <-seen, true
		}
		if timedOut && got.err != nil && r.overBudget {
			t.Logf("%s: change %d not in the kernel within the change budget of %v (the first sync is not complete): reported as > %v",
				c.name, k, b.changeBudget, b.changeBudget)
			r.lat, r.changeOverBudget = append(r.lat, b.changeBudget), true
			r.floor = append(r.floor, fl.wait(t, w))
			break
		}
		if got.err != nil {
			t.Fatalf("change %d: %s: real server %s in %s:%d: %v after %v", k, c.name, ip, vip, servicePort, got.err, time.Since(w))
		}
		r.lat = append(r.lat, got.at.Sub(w))
		r.floor = append(r.floor, fl.wait(t, w))
		if r.overBudget {
			// Its one change; no sync of it may have ended yet.
			break
		}
		// Let that sync end before the next change. Each look is a scrape
		// of /metrics, which with --service-stats gathers the per-Service
		// series: settleEvery keeps the harness' scrapes a few per change,
		// not ten a second, a load no Prometheus puts on a proxy.
		for {
			time.Sleep(settleEvery)
			ts, err := lastSync(node, c.syncMetric)
			if err == nil && ts.After(w) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("change %d: %s: no sync ended after the write within %v", k, c.name, b.changeBudget)
			}
		}
		if k%10 == 9 {
			t.Logf("%s: %d changes, last %v (floor %v)", c.name, k+1, r.lat[k].Round(time.Millisecond), r.floor[k].Round(time.Millisecond))
		}
	}
	r.changeCPU, r.changeWall = cpuTime(t, p.Pid())-cpu0, time.Since(wall0)
	n1, sum1 := syncStats(node, c.durMetric)
	r.changeSyncs, r.changeSyncSum = n1-n0, sum1-sum0
	if ours, ok := p.(ipvsProxy); ok && b.breakdown {
		r.breakdown = breakdownReport(readBreakdown(t, ours.Log), r.lat, r.floor, r.answered)
	}
	slices.Sort(r.lat)
	slices.Sort(r.floor)
}

// floor is a bare client-go informer of the benchmark's EndpointSlices,
// its connection made in the node namespace (through the same relay as the
// proxies'): when a change reaches it is the latency floor of any proxy
// that watches the API server.
type floor struct {
	mu       sync.Mutex
	name, ip string
	got      chan time.Time
	stopCh   chan struct{}
}

func startFloor(t *testing.T, node *ktest.Node, admin *rest.Config, apiPort string) *floor {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Host = "https://127.0.0.1:" + apiPort
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := node.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	f := &floor{got: make(chan time.Time, 1), stopCh: make(chan struct{})}
	fac := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cfg), 0, informers.WithNamespace(benchNS))
	inf := fac.Discovery().V1().EndpointSlices().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		at := time.Now()
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || len(s.Endpoints) == 0 || len(s.Endpoints[0].Addresses) == 0 {
			return
		}
		f.mu.Lock()
		hit := s.Name == f.name && s.Endpoints[0].Addresses[0] == f.ip
		if hit {
			f.name = ""
		}
		f.mu.Unlock()
		if hit {
			f.got <- at
		}
	}}); err != nil {
		t.Fatal(err)
	}
	fac.Start(f.stopCh)
	if !cache.WaitForCacheSync(f.stopCh, inf.HasSynced) {
		t.Fatal("floor informer: cache not synced")
	}
	return f
}

func (f *floor) expect(name, ip string) {
	f.mu.Lock()
	f.name, f.ip = name, ip
	f.mu.Unlock()
}

func (f *floor) wait(t *testing.T, w time.Time) time.Duration {
	t.Helper()
	select {
	case at := <-f.got:
		return at.Sub(w)
	case <-time.After(5 * time.Minute):
		t.Fatal("floor informer: the change did not arrive in 5 minutes")
		return 0
	}
}

func (f *floor) stop() { close(f.stopCh) }
