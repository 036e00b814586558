//go:build kernel

package takeover

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
)

// rollback is step 3: under traffic, ipvs-proxy gets SIGTERM and kube-proxy
// starts on the node it left, as docs/migration.md's way back does it
// (`kubectl label node NODE ipvs-proxy.io/service-proxy-`); to nftables
// mode, with an empty /lib/modules (noModules), as its way out does it.
// kube-proxy must sync cleanly: its sync timestamp advances, no ipset
// error in its log, a Service created afterwards is served.
func (b *bed) rollback(p *ipvsProxy) (string, *kubeproxy.Process) {
	t := b.t
	var rep strings.Builder
	before := b.dumpKernel("before-rollback.txt")
	ctBefore := b.conntrackStats()
	tr := b.startTraffic()
	time.Sleep(3 * time.Second)
	ipvsMon := startIPVSMonitor(t, b.node.NS, 50*time.Millisecond)
	b.witness.ipvs.Store(ipvsMon)
	addrMon := startAddrMonitor(t, b.node.NS)

	start := time.Now()
	exitTook, err := p.Stop(30 * time.Second)
	if err != nil {
		t.Errorf("ipvs-proxy after SIGTERM: %v", err)
	}
	kp := kubeproxy.Start(t, b.node.NS, kubeproxy.Options{Bin: b.kubeProxyBin, NodeName: thisNode,
		ConfigFile: b.kubeProxyConfig, LogFile: fmt.Sprintf("%s/kube-proxy-%d.log", b.dir, b.cycle+2), Verbosity: 2, NoModules: b.noModules()})
	first, err := kp.WaitSync(families, time.Time{}, 8*time.Minute)
	if err != nil {
		t.Fatalf("kube-proxy after ipvs-proxy: %v", err)
	}
	firstSync := first.Sub(start)

	// A Service created now: kube-proxy must program it whole. Its syncs
	// take tens of seconds in the emulated VM, so the check waits for its
	// own metric, not a fixed time: once every family has ended two syncs
	// after the creation, the second of them started after it, and the
	// Service must answer at once.
	late := b.addService(fmt.Sprintf("late-%d", b.cycle))
	created := time.Now()
	var lateServed time.Duration
	second := first
	if !b.periodicSyncs() {
		// iptables mode syncs on changes only (its periodic resync is
		// hourly): the Service must be served by the sync it causes.
		if lateServed, err = b.servedWithin(late, kubeProxySyncWait); err != nil {
			t.Errorf("Service created after the way back not served: %v", err)
		}
	} else {
		synced, err := kp.WaitSync(families, created, kubeProxySyncWait)
		if err == nil {
			// now is after every family's sync that ended after the creation:
			// the next one of each started after that one ended.
			synced, err = kp.WaitSync(families, time.Now(), kubeProxySyncWait)
		}
		if err != nil {
			t.Errorf("kube-proxy did not sync twice after a Service was created: %v", err)
		} else {
			lateServed = synced.Sub(created)
			if out, err := b.client.Request("tcp", hostPort(late, 80)); err != nil || !answeredBy(out, []string{"pod-a"}) {
				t.Errorf("Service created after the rollback not served after kube-proxy's second sync since its creation (%v after it): %q %v",
					lateServed.Round(time.Millisecond), out, err)
			}
		}
		// A periodic sync after it: the timestamp advances.
		if second, err = kp.WaitSync(families, first, kubeProxySyncWait); err != nil {
			t.Errorf("kube-proxy's sync timestamp did not advance after its first sync: %v", err)
		}
	}
	time.Sleep(2 * time.Second)
	ipvsEvents, _, polls, monErr := ipvsMon.end()
	addrEvents, _ := addrMon.end()
	tr.end()
	ok, failed, stalled, traffic := tr.snapshot()
	after := b.dumpKernel("after-rollback.txt")
	m, err := kp.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	ipsetErrs := kp.IPSetErrors()
	code, body, herr := kp.Healthz()

	fmt.Fprintf(&rep, "rollback: ipvs-proxy exited %v after SIGTERM; kube-proxy's first sync ended %v after the SIGTERM, the next %v after it; a Service created after the rollback served by kube-proxy's second sync after its creation, %v after it\n",
		exitTook.Round(time.Millisecond), firstSync.Round(time.Millisecond), second.Sub(first).Round(time.Millisecond), lateServed.Round(time.Millisecond))
	fmt.Fprintf(&rep, "traffic through the rollback: %d requests and stream answers served, %d failed, %d excused (during a stall of the bed, or by the capture's verdict); %s\n%s",
		ok, failed, stalled, conntrackDelta(ctBefore, b.conntrackStats()), traffic)
	rep.WriteString(b.witness.summary(start))
	fmt.Fprintf(&rep, "kube-proxy: /healthz %d; metrics %s %v, %s %v, restore failures %v; ipset errors in its log: %d\n",
		code, kubeproxy.LastSyncMetric, second.Format(time.RFC3339Nano), "kubeproxy_sync_proxy_rules_duration_seconds_count",
		m.Sum("kubeproxy_sync_proxy_rules_duration_seconds_count"), m.Sum("kubeproxy_sync_proxy_rules_iptables_restore_failures_total"), len(ipsetErrs))
	for _, l := range firstN(ipsetErrs, 10) {
		fmt.Fprintf(&rep, "  %s\n", l)
	}
	fmt.Fprintf(&rep, "IPVS monitor (%d polls): %d changes\n", polls, len(ipvsEvents))
	for _, e := range firstN(ipvsEvents, 30) {
		fmt.Fprintf(&rep, "  %s\n", e)
	}
	fmt.Fprintf(&rep, "address monitor: %d events\n", len(addrEvents))
	for _, e := range firstN(addrEvents, 30) {
		fmt.Fprintf(&rep, "  %s\n", e)
	}
	fmt.Fprintf(&rep, "kernel before and after:\n%s", changedLines(before, after, 80))

	if failed > 0 {
		t.Errorf("%d requests or stream answers failed through the rollback (%s):\n%s", failed, tr.failedTargets(), traffic)
	}
	if monErr != nil {
		t.Errorf("IPVS monitor: %v", monErr)
	}
	if len(ipsetErrs) > 0 {
		t.Errorf("kube-proxy logged %d ipset errors after the rollback, first: %s", len(ipsetErrs), ipsetErrs[0])
	}
	if herr != nil || code != 200 {
		t.Errorf("kube-proxy /healthz after the rollback: %d %v %s", code, herr, body)
	}
	if v := m.Sum("kubeproxy_sync_proxy_rules_iptables_restore_failures_total"); v != 0 {
		t.Errorf("kubeproxy_sync_proxy_rules_iptables_restore_failures_total %v, want 0", v)
	}
	b.denied()
	return rep.String(), kp
}

// addService creates a ClusterIP Service NAME served by pod-a and returns
// its ClusterIP.
func (b *bed) addService(name string) string {
	b.t.Helper()
	http := port("http", corev1.ProtocolTCP, 80, 8080, 0)
	svc, err := b.cluster.client.CoreV1().Services(ns).Create(b.cluster.ctx(),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{http}}}, metav1.CreateOptions{})
	b.cluster.must(svc, err)
	b.cluster.must(b.cluster.client.DiscoveryV1().EndpointSlices(ns).Create(b.cluster.ctx(),
		slice(name+"-1", name, discoveryv1.AddressTypeIPv4, []corev1.ServicePort{http}, ready(thisNode, v4(b.pods.a))), metav1.CreateOptions{}))
	return svc.Spec.ClusterIP
}

// cleanupAfterRollback is step 4: `ipvs-proxy cleanup` on the node kube-proxy
// took back, with traffic flowing. The names are shared, so cleanup must
// find kube-proxy running and remove nothing: the kernel is the same
// before and after, no request fails, and kube-proxy's next sync succeeds.
func (b *bed) cleanupAfterRollback(kp *kubeproxy.Process) string {
	t := b.t
	c := b.cleanupUnderTraffic(kp, "cleanup")
	if c.err == nil {
		t.Errorf("ipvs-proxy cleanup with kube-proxy running succeeded; want a refusal:\n%s", c.out)
	} else if !strings.Contains(c.err.Error(), "kube-proxy (pid") || !strings.Contains(c.err.Error(), "nothing removed") {
		t.Errorf("ipvs-proxy cleanup with kube-proxy running: %v; want it to name kube-proxy and remove nothing", c.err)
	}
	if d := changedLines(stripCounters(c.before), stripCounters(c.after), 40); d != "  (none)\n" {
		t.Errorf("ipvs-proxy cleanup changed kube-proxy's kernel state:\n%s", d)
	}
	return fmt.Sprintf("cleanup after the rollback: %v; kernel unchanged; %s", c.err, c.summary())
}

// cleanupRun is one `ipvs-proxy cleanup` on the node kube-proxy serves,
// under traffic (cleanupUnderTraffic).
type cleanupRun struct {
	out           string
	err           error
	before, after string
	// nextSync is how long after its sync before the cleanup kube-proxy
	// synced again; in iptables mode, how long after its creation a
	// Service created after the cleanup was served.
	nextSync                time.Duration
	served, failed, excused int64
}

func (c cleanupRun) summary() string {
	return fmt.Sprintf("kube-proxy synced again %v later; traffic %d served, %d failed, %d excused (during a stall of the bed, or by the capture's verdict)\n",
		c.nextSync.Round(time.Millisecond), c.served, c.failed, c.excused)
}

// cleanupUnderTraffic runs `ipvs-proxy ARGS --state-dir DIR` (a cleanup)
// in the node with traffic flowing and kube-proxy serving, and waits for
// kube-proxy's next sync after it; a failed request or sync is a test
// error. The kernel is dumped before and after.
func (b *bed) cleanupUnderTraffic(kp *kubeproxy.Process, args ...string) cleanupRun {
	t := b.t
	tr := b.startTraffic()
	time.Sleep(2 * time.Second)
	lastSync, err := kp.LastSync(families)
	if err != nil {
		t.Fatal(err)
	}
	var c cleanupRun
	c.before = b.dumpKernel("before-cleanup.txt")
	c.out, c.err = b.node.Exec(b.proxyBin, append(args, "--state-dir", b.dir+"/state")...)
	c.after = b.dumpKernel("after-cleanup.txt")
	if b.periodicSyncs() {
		next, err := kp.WaitSync(families, lastSync, kubeProxySyncWait)
		if err != nil {
			t.Errorf("kube-proxy's sync after %v: %v", args, err)
		}
		c.nextSync = next.Sub(lastSync)
	} else {
		// No periodic sync to wait for: a Service created now must be
		// served by the sync it causes.
		served, err := b.servedWithin(b.addService(fmt.Sprintf("after-cleanup-%d", b.cycle)), kubeProxySyncWait)
		if err != nil {
			t.Errorf("a Service created after %v not served: %v", args, err)
		}
		c.nextSync = served
	}
	time.Sleep(time.Second)
	tr.end()
	var traffic string
	c.served, c.failed, c.excused, traffic = tr.snapshot()
	if c.failed > 0 {
		t.Errorf("%d requests failed around ipvs-proxy %v (%s):\n%s", c.failed, args, tr.failedTargets(), traffic)
	}
	return c
}

// stripCounters drops iptables-save's chain counters ("[0:0]"), which
// change with traffic.
func stripCounters(s string) string {
	re := regexp.MustCompile(`\[\d+:\d+\]`)
	return re.ReplaceAllString(s, "")
}
