//go:build kernel

package daemonbench

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/ipvs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/consoleprof"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

const (
	metricsAddr = "127.0.0.1:10249"
	// syncPeriod is long enough that no periodic full sync runs during the
	// benchmark: every sync after the first is a partial one.
	syncPeriod = 3 * time.Hour
	// pollEvery is the netlink polling interval of the latency loop.
	pollEvery = 10 * time.Millisecond
)

// status reads a "VmXXX:   N kB" field of /proc/PID/status in KiB.
func status(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("%s: %q", field, l)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// getOK is GET http://addr/path in the node namespace; any status but 200
// is an error.
func getOK(node *ktest.Node, addr, path string) (string, error) {
	code, body, err := node.HTTPGet(addr, path, 60*time.Second)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET %s: status %d", path, code)
	}
	return body, err
}

// profResult is a profile the harness read from the proxy.
type profResult struct {
	prof string
	err  error
}

// rssWatcher samples a process's VmRSS every 100 ms and keeps the largest
// with the phase of the test it was seen in.
type rssWatcher struct {
	mu       sync.Mutex
	cur      string
	max      int
	maxPhase string
	done     chan struct{}
	stopOnce sync.Once
}

func watchRSS(pid int, phase string) *rssWatcher {
	w := &rssWatcher{cur: phase, done: make(chan struct{})}
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
					if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB")); err == nil {
						w.mu.Lock()
						if n > w.max {
							w.max, w.maxPhase = n, w.cur
						}
						w.mu.Unlock()
					}
				}
			}
		}
	}()
	return w
}

func (w *rssWatcher) phase(p string) {
	w.mu.Lock()
	w.cur = p
	w.mu.Unlock()
}

func (w *rssWatcher) peak() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max, w.maxPhase
}

func (w *rssWatcher) stop() { w.stopOnce.Do(func() { close(w.done) }) }

// printProfile prints a pprof profile of the proxy to the console, where
// the host test finds it (package consoleprof) and writes it to
// DAEMONBENCH_<KIND>_PROFILE.
func printProfile(kind, prof string) {
	if err := consoleprof.Print(os.Stdout, kind, []byte(prof)); err != nil {
		fmt.Fprintf(os.Stderr, "%s profile: %v\n", kind, err)
	}
}

// metric is the value of the sample named exactly name (labels included).
func metric(text, name string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// histQuantile is the upper bound of the bucket holding quantile q of a
// Prometheus histogram in text form.
func histQuantile(text, name string, q float64) string {
	count, _ := metric(text, name+"_count")
	if count == 0 {
		return "n/a"
	}
	prefix := name + `_bucket{le="`
	for _, l := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(l, prefix)
		if !ok {
			continue
		}
		le, v, _ := strings.Cut(rest, `"} `)
		n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if n >= math.Ceil(q*count) {
			return "≤ " + le + " s"
		}
	}
	return "?"
}

// quantile of sorted durations, nearest rank.
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

func countIPVS(save string) (vs, rs int) {
	for _, l := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(l, "-A "):
			vs++
		case strings.HasPrefix(l, "-a "):
			rs++
		}
	}
	return vs, rs
}

// addrBatch turns `ip -o addr show dev kube-ipvs0` into `ip -batch` input.
func addrBatch(t *testing.T, out string) (string, int) {
	t.Helper()
	var b strings.Builder
	n := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		if f[2] != "inet" && f[2] != "inet6" {
			t.Fatalf("unexpected address line %q", l)
		}
		fmt.Fprintf(&b, "address add %s dev kube-ipvs0\n", f[3])
		n++
	}
	return b.String(), n
}

// appliedParts is the sum of the applier's timed parts of a "sync applied"
// record.
func appliedParts(r map[string]any) time.Duration {
	var d time.Duration
	for _, k := range []string{"dumpTook", "journalTook", "unbindTook", "ipvsTook", "rulesTook", "bindTook"} {
		d += seconds(r, k)
	}
	return d
}

func timed(t *testing.T, what string, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	err := f()
	d := time.Since(start)
	if err != nil {
		// The figures measured so far are still reported.
		t.Errorf("%s: %v", what, err)
	}
	t.Logf("%s: %v", what, d.Round(time.Millisecond))
	return d
}

func TestDaemonBenchGuest(t *testing.T) {
	ctx := context.Background()
	services := envInt(t, "DAEMONBENCH_SERVICES", 10000)
	endpoints := envInt(t, "DAEMONBENCH_ENDPOINTS", 10)
	changes := envInt(t, "DAEMONBENCH_CHANGES", 100)
	adminCfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "DAEMONBENCH_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	adminCfg.QPS, adminCfg.Burst = -1, 0
	client := kubernetes.NewForConfigOrDie(adminCfg)
	bin := vmtest.GuestEnv(t, "DAEMONBENCH_PROXY_BIN")
	proxyKC := vmtest.GuestEnv(t, "DAEMONBENCH_KUBECONFIG_PROXY")

	node := ktest.NewNode(t)
	// The client puts the node's LAN address (ktest.NodeIPv4) on eth0: the
	// planner serves a family only when the node has an address of it.
	node.AddClient(t, "cli")
	for x := 0; x < realPods; x++ {
		node.AddPod(t, fmt.Sprintf("pod-%d", x), podIP(x).String())
	}
	apiTarget := strings.TrimPrefix(adminCfg.Host, "https://")
	_, apiPort, err := net.SplitHostPort(apiTarget)
	if err != nil {
		t.Fatal(err)
	}
	node.Relay(t, "127.0.0.1:"+apiPort, apiTarget)

	// (1) The first full sync.
	p := startProxy(t, node, bin, proxyKC)
	pid := p.Cmd.Process.Pid
	rssWatch := watchRSS(pid, "informer lists and first full sync")
	defer rssWatch.stop()
	cachesRec, _ := p.waitRecord(t, "the informer caches", 30*time.Minute, 200*time.Millisecond, func(r map[string]any) bool {
		return strings.HasPrefix(str(r, "msg"), "informer caches synced")
	})
	// Where asked for, the proxy's CPU profile of its first full sync
	// (DAEMONBENCH_FIRSTCPU_PROFILE): from the caches synced, for
	// DAEMONBENCH_FIRSTCPU_SECONDS (default 150).
	var firstProf chan profResult
	if os.Getenv("DAEMONBENCH_FIRSTCPU_PROFILE") != "" {
		firstProf = make(chan profResult, 1)
		secs := envInt(t, "DAEMONBENCH_FIRSTCPU_SECONDS", 150)
		go func() {
			code, body, err := node.HTTPGet(metricsAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), time.Duration(secs+60)*time.Second)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("CPU profile of the first full sync: status %d", code)
			}
			firstProf <- profResult{body, err}
		}()
	}
	// The proxy logs, so `ip netns exec` has exec'd it: the PID is its own.
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); !strings.HasPrefix(string(comm), "ipvs-proxy") {
		t.Fatalf("PID %d is %q, not the proxy", pid, comm)
	}
	var appliedRec map[string]any
	failed := 0
	doneRec, doneSeen := p.waitRecord(t, "the first full sync", 60*time.Minute, 200*time.Millisecond, func(r map[string]any) bool {
		switch str(r, "msg") {
		case "sync applied":
			if str(r, "mode") == "full" {
				appliedRec = r
			}
		case "sync failed; retrying":
			failed++
		case "sync done":
			return str(r, "mode") == "full"
		}
		return false
	})
	cachesAt := logTime(cachesRec).Sub(p.Started)
	fullAt := logTime(doneRec).Sub(p.Started)
	fullTook := seconds(doneRec, "took")
	t.Logf("caches synced %v after start; first full sync done %v after start (seen %v), took %v; %d failed syncs before",
		cachesAt, fullAt, doneSeen.Sub(p.Started), fullTook, failed)
	hwmAfterFull := status(t, pid, "VmHWM")
	rssWatch.phase("kernel read back by the test")

	// What the proxy programmed: checked, and kept for the floor.
	var ipvsSave, addrOut, setSave string
	dumpIPVS := timed(t, "ipvsadm -S -n of the proxy's namespace", func() (err error) {
		ipvsSave, err = node.Exec("ipvsadm", "-S", "-n")
		return err
	})
	addrOut = node.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	if setSave, err = node.IPSetSave(); err != nil {
		t.Fatal(err)
	}
	rules4, rules6 := node.Run(t, "iptables-save"), node.Run(t, "ip6tables-save")
	nVS, nRS := countIPVS(ipvsSave)
	addrIn, nAddr := addrBatch(t, addrOut)
	nSet := 0
	for _, l := range strings.Split(setSave, "\n") {
		if strings.HasPrefix(l, "add ") {
			nSet++
		}
	}
	t.Logf("kernel after the first full sync: %d virtual servers, %d real servers, %d kube-ipvs0 addresses, %d ipset entries",
		nVS, nRS, nAddr, nSet)
	// The API server's own "kubernetes" Service adds one virtual server
	// (its endpoint is the host's address).
	if nVS < services || nRS < services*endpoints || nAddr < services {
		t.Fatalf("the first full sync did not program everything: %d virtual servers (want ≥ %d), %d real servers (want ≥ %d), %d addresses",
			nVS, services, nRS, services*endpoints, nAddr)
	}

	if firstProf != nil {
		if r := <-firstProf; r.err != nil {
			t.Errorf("CPU profile of the first full sync: %v", r.err)
		} else {
			printProfile("firstcpu", r.prof)
		}
	}

	// (3) Network programming latency, one EndpointSlice change at a time.
	rssWatch.phase("the 100 changes")
	// Where asked for, the proxy's CPU profile of the first 20 s of it.
	var cpuProf chan profResult
	if os.Getenv("DAEMONBENCH_CPU_PROFILE") != "" {
		cpuProf = make(chan profResult, 1)
		go func() {
			prof, err := getOK(node, metricsAddr, "/debug/pprof/profile?seconds=20")
			cpuProf <- profResult{prof, err}
		}()
	}
	h, err := ipvs.New(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var lat, syncTook, ipvsTook, bindTook, rulesTook, dumpTook, journalTook, otherTook []time.Duration
	polls := 0
	for k := 0; k < changes; k++ {
		i := changedService(k, services)
		svc, err := client.CoreV1().Services(benchNS).Get(ctx, serviceName(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl, err := client.DiscoveryV1().EndpointSlices(benchNS).Get(ctx, sliceName(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vs := &ipvs.Service{AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_TCP,
			Address: net.ParseIP(svc.Spec.ClusterIP), Port: servicePort}
		want := changeIP(k)
		sl.Endpoints[0].Addresses = []string{want.String()}
		p.scan() // records so far are not this change's
		w := time.Now()
		if sl.Annotations == nil {
			sl.Annotations = map[string]string{}
		}
		sl.Annotations[triggerAnnotation] = w.UTC().Format(time.RFC3339Nano)
		if _, err := client.DiscoveryV1().EndpointSlices(benchNS).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := w.Add(5 * time.Minute)
		for {
			polls++
			dests, err := h.GetDestinations(vs)
			if err != nil {
				t.Fatalf("change %d: GET_DEST %s: %v", k, svc.Spec.ClusterIP, err)
			}
			if slices.ContainsFunc(dests, func(d *ipvs.Destination) bool {
				a, _ := netip.AddrFromSlice(d.Address)
				return a.Unmap() == want && d.Weight > 0
			}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("change %d: real server %s not in %s:%d after 5 minutes", k, want, svc.Spec.ClusterIP, servicePort)
			}
			time.Sleep(pollEvery)
		}
		lat = append(lat, time.Since(w))
		// Let that sync finish before the next change.
		var applied map[string]any
		done, _ := p.waitRecord(t, fmt.Sprintf("change %d's sync", k), 5*time.Minute, 50*time.Millisecond, func(r map[string]any) bool {
			if str(r, "msg") == "sync applied" {
				applied = r
			}
			return str(r, "msg") == "sync done"
		})
		syncTook = append(syncTook, seconds(done, "took"))
		if applied != nil {
			ipvsTook = append(ipvsTook, seconds(applied, "ipvsTook"))
			bindTook = append(bindTook, seconds(applied, "bindTook"))
			rulesTook = append(rulesTook, seconds(applied, "rulesTook"))
			dumpTook = append(dumpTook, seconds(applied, "dumpTook"))
			journalTook = append(journalTook, seconds(applied, "journalTook"))
			otherTook = append(otherTook, seconds(done, "took")-appliedParts(applied))
		}
		if k%10 == 9 {
			t.Logf("%d changes, last %v", k+1, lat[len(lat)-1].Round(time.Millisecond))
		}
	}
	slices.Sort(lat)
	for _, d := range [][]time.Duration{syncTook, ipvsTook, bindTook, rulesTook, dumpTook, journalTook, otherTook} {
		slices.Sort(d)
	}
	rssWatch.phase("metrics and profiles read")
	metrics, err := getOK(node, metricsAddr, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	const npl = "ipvs_proxy_network_programming_duration_seconds"
	nplCount, _ := metric(metrics, npl+"_count")
	nplSum, _ := metric(metrics, npl+"_sum")
	vsMetric, _ := metric(metrics, "ipvs_proxy_virtual_servers")
	rsMetric, _ := metric(metrics, "ipvs_proxy_real_servers")
	applyErrs, _ := metric(metrics, `ipvs_proxy_apply_errors_total{mode="full"}`)
	applyErrsP, _ := metric(metrics, `ipvs_proxy_apply_errors_total{mode="partial"}`)
	fullSyncs, _ := metric(metrics, `ipvs_proxy_syncs_total{mode="full"}`)
	heapAlloc, _ := metric(metrics, "go_memstats_heap_alloc_bytes")
	heapSys, _ := metric(metrics, "go_memstats_heap_sys_bytes")
	nextGC, _ := metric(metrics, "go_memstats_next_gc_bytes")

	// The proxy's heap profile, where asked for.
	if os.Getenv("DAEMONBENCH_HEAP_PROFILE") != "" {
		if prof, err := getOK(node, metricsAddr, "/debug/pprof/heap"); err != nil {
			t.Errorf("heap profile: %v", err)
		} else {
			printProfile("heap", prof)
		}
	}
	if cpuProf != nil {
		if r := <-cpuProf; r.err != nil {
			t.Errorf("CPU profile: %v", r.err)
		} else {
			printProfile("cpu", r.prof)
		}
	}

	// (4) Peak RSS, then stop the proxy.
	hwm := status(t, pid, "VmHWM")
	rss := status(t, pid, "VmRSS")
	if _, err := p.Stop(2 * time.Minute); err != nil {
		t.Fatalf("proxy after SIGTERM: %v", err)
	}

	// (2) The floor: the same content in a fresh namespace. First empty
	// the proxy's namespace (untimed): IPVS services of every namespace
	// share one hash table, and the proxy started from an empty one.
	timed(t, "ipvsadm -C and kube-ipvs0 removal in the proxy's namespace (untimed cleanup)", func() error {
		if _, err := node.Exec("ipvsadm", "-C"); err != nil {
			return err
		}
		_, err := node.Exec("ip", "link", "del", "kube-ipvs0")
		return err
	})
	fresh := ktest.NewNode(t)
	fresh.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	floorIPVS := timed(t, "floor: ipvsadm -R", func() error { _, err := fresh.ExecInput(ipvsSave, "ipvsadm", "-R"); return err })
	floorAddr := timed(t, "floor: ip -batch", func() error { _, err := fresh.ExecInput(addrIn, "ip", "-batch", "-"); return err })
	floorSets := timed(t, "floor: ipset restore", func() error { _, err := fresh.ExecInput(setSave, "ipset", "restore"); return err })
	floorRules := timed(t, "floor: iptables-restore + ip6tables-restore", func() error {
		if _, err := fresh.ExecInput(rules4, "iptables-restore"); err != nil {
			return err
		}
		_, err := fresh.ExecInput(rules6, "ip6tables-restore")
		return err
	})
	floor := floorIPVS + floorAddr + floorSets + floorRules
	fh, err := ipvs.New(fresh.Path())
	if err != nil {
		t.Fatal(err)
	}
	fsvcs, err := fh.GetServices()
	fh.Close()
	if err != nil || len(fsvcs) != nVS {
		t.Errorf("floor namespace holds %d virtual servers (%v), want %d", len(fsvcs), err, nVS)
	}

	pct := func(d time.Duration) string { return fmt.Sprintf("%.2f %%", 100*d.Seconds()/fullTook.Seconds()) }
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	mib := func(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	p50, p99, pmax := quantile(lat, 0.5), quantile(lat, 0.99), lat[len(lat)-1]
	var rep strings.Builder
	fmt.Fprintf(&rep, "DAEMONBENCH-REPORT-BEGIN\n")
	fmt.Fprintf(&rep, "content: %d Services × %d endpoints (ClusterIP, TCP); kernel: %d virtual servers, %d real servers, %d kube-ipvs0 addresses, %d ipset entries (metrics: %.0f / %.0f)\n",
		services, endpoints, nVS, nRS, nAddr, nSet, vsMetric, rsMetric)
	fmt.Fprintf(&rep, "proxy start -> informer caches synced: %s\n", ms(cachesAt))
	fmt.Fprintf(&rep, "proxy start -> first full sync done: %s (sync itself, plan + apply, \"took\": %s; ipvs %s, rules %s, bind %s, dump %s; %d failed syncs before; apply errors full/partial %.0f/%.0f; full syncs %.0f)\n",
		ms(fullAt), ms(fullTook), ms(seconds(appliedRec, "ipvsTook")), ms(seconds(appliedRec, "rulesTook")), ms(seconds(appliedRec, "bindTook")),
		ms(seconds(appliedRec, "dumpTook")), failed, applyErrs, applyErrsP, fullSyncs)
	fmt.Fprintf(&rep, "  first full sync outside the applier's timed parts (model, plan, node addresses, health): %s\n", ms(fullTook-appliedParts(appliedRec)))
	fmt.Fprintf(&rep, "ipvsadm -S -n of the converged namespace: %s\n", ms(dumpIPVS))
	fmt.Fprintf(&rep, "floor (fresh namespace): ipvsadm -R %s + ip -batch %s + ipset restore %s + ip(6)tables-restore %s = %s\n",
		ms(floorIPVS), ms(floorAddr), ms(floorSets), ms(floorRules), ms(floor))
	fmt.Fprintf(&rep, "ratio full sync (took) / floor: %.2f; start -> done / floor: %.2f; target ≤ 1.5: %s\n",
		fullTook.Seconds()/floor.Seconds(), fullAt.Seconds()/floor.Seconds(), verdict(fullTook.Seconds() <= 1.5*floor.Seconds()))
	fmt.Fprintf(&rep, "parts: ipvs %s / ipvsadm -R %s = %.2f; bind %s / ip -batch %s = %.2f; rules (ipsets + chains) %s / (ipset restore + ip(6)tables-restore) %s = %.2f\n",
		ms(seconds(appliedRec, "ipvsTook")), ms(floorIPVS), seconds(appliedRec, "ipvsTook").Seconds()/floorIPVS.Seconds(),
		ms(seconds(appliedRec, "bindTook")), ms(floorAddr), seconds(appliedRec, "bindTook").Seconds()/floorAddr.Seconds(),
		ms(seconds(appliedRec, "rulesTook")), ms(floorSets+floorRules), seconds(appliedRec, "rulesTook").Seconds()/(floorSets+floorRules).Seconds())
	fmt.Fprintf(&rep, "network programming latency, API write -> new real server in the kernel (netlink poll every %v), n=%d: p50 %s p99 %s max %s min %s\n",
		pollEvery, len(lat), ms(p50), ms(p99), ms(pmax), ms(lat[0]))
	fmt.Fprintf(&rep, "  as a share of the full sync (took): p50 %s, p99 %s; target < 1 %%: %s\n", pct(p50), pct(p99), verdict(p99.Seconds() < 0.01*fullTook.Seconds()))
	if len(syncTook) > 0 && len(ipvsTook) > 0 {
		fmt.Fprintf(&rep, "  partial syncs (proxy log), median: took %s, kube-ipvs0 dump %s, journal %s, ipvs %s, rules %s, bind %s, outside the applier (model, plan, node addresses) %s; max took %s\n",
			ms(quantile(syncTook, 0.5)), ms(quantile(dumpTook, 0.5)), ms(quantile(journalTook, 0.5)), ms(quantile(ipvsTook, 0.5)),
			ms(quantile(rulesTook, 0.5)), ms(quantile(bindTook, 0.5)), ms(quantile(otherTook, 0.5)), ms(syncTook[len(syncTook)-1]))
	}
	if nplCount > 0 {
		fmt.Fprintf(&rep, "  proxy's %s: count %.0f, mean %s, p50 %s, p99 %s\n", npl, nplCount,
			ms(time.Duration(nplSum/nplCount*float64(time.Second))), histQuantile(metrics, npl, 0.5), histQuantile(metrics, npl, 0.99))
	}
	fmt.Fprintf(&rep, "proxy peak RSS (VmHWM): %s (after the first full sync %s; VmRSS at the end %s); target < 150 MiB: %s\n",
		mib(hwm), mib(hwmAfterFull), mib(rss), verdict(hwm < 150*1024))
	peak, phase := rssWatch.peak()
	fmt.Fprintf(&rep, "  largest VmRSS sampled every 100ms: %s, during %s\n", mib(peak), phase)
	fmt.Fprintf(&rep, "  Go heap at the end: alloc %s, sys %s, next GC at %s\n", mib(int(heapAlloc/1024)), mib(int(heapSys/1024)), mib(int(nextGC/1024)))
	fmt.Fprintf(&rep, "netlink polls: %d\nDAEMONBENCH-REPORT-END\n", polls)
	// On stdout, not through t.Log, so the block is not indented.
	fmt.Print(rep.String())
}
