//go:build kernel

package takeover

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest/kstate"
)

// nodeIPs are the node's addresses on every interface but kube-ipvs0, as
// `run` finds them: plan gets the same as --node-ip.
func (b *bed) nodeIPs() string {
	b.t.Helper()
	out := b.node.Run(b.t, "ip", "-o", "addr", "show")
	var ips []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[1] != "kube-ipvs0" {
			ips = append(ips, strings.Split(f[3], "/")[0])
		}
	}
	return strings.Join(ips, ",")
}

// plan is `ipvs-proxy plan` for the objects now in the API server, with the
// node's identity and the settings of kube-proxy's config.conf.
func (b *bed) plan() (string, error) {
	file := filepath.Join(b.dir, "objects.json")
	if err := b.cluster.dump(file); err != nil {
		return "", err
	}
	out, err := exec.Command(b.proxyBin, "plan", "-f", file, "--node-name", thisNode, "--node-ip", b.nodeIPs(),
		"--cluster-cidr", clusterCIDR, "--api-server-address", b.apiServerAddress).Output()
	if err != nil {
		return "", fmt.Errorf("ipvs-proxy plan: %w", err)
	}
	return string(out), nil
}

// converge waits until the kernel holds exactly what plan prints and
// returns how long that took, or the last difference.
func (b *bed) converge(timeout time.Duration) (time.Duration, string) {
	b.t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		want, err := b.plan()
		if err != nil {
			b.t.Fatal(err)
		}
		got := b.leftByMode(kstate.Text(b.t, b.node.NS))
		if got == want {
			return time.Since(start), ""
		}
		last = kstate.Diff(want, got)
		time.Sleep(time.Second)
	}
	return time.Since(start), last
}

// dumpKernel saves the node's data plane as the system tools print it, for
// the report.
func (b *bed) dumpKernel(name string) string {
	var sb strings.Builder
	for _, cmd := range [][]string{{"ipvsadm", "-S", "-n"}, {"ip", "-o", "addr", "show", "dev", "kube-ipvs0"},
		{"ipset", "save"}, {"iptables-save"}, {"ip6tables-save"}} {
		out, err := b.node.Exec(cmd[0], cmd[1:]...)
		fmt.Fprintf(&sb, "### %s (%v)\n%s", strings.Join(cmd, " "), err, out)
	}
	path := filepath.Join(b.dir, name)
	_ = os.WriteFile(path, []byte(sb.String()), 0o644)
	return sb.String()
}

// proxyReady polls ipvs-proxy's /healthz until it answers 200 and returns
// how long after started that was, or 0 (a test error) after two minutes.
func (b *bed) proxyReady(p *ipvsProxy, started time.Time) time.Duration {
	for {
		code, _, err := b.node.HTTPGet(kubeproxy.HealthzAddress, "/healthz", 5*time.Second)
		if err == nil && code == 200 {
			return time.Since(started)
		}
		if !p.Alive() || time.Since(started) > 2*time.Minute {
			b.t.Errorf("ipvs-proxy not ready (/healthz %d %v) %v after its start; running %v; log:\n%s", code, err,
				time.Since(started).Round(time.Millisecond), p.Alive(), p.Tail(30))
			return 0
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fullSyncs waits until ipvs-proxy ran n full syncs and returns how long
// after started that was, or 0 (a test error) after two minutes.
func (b *bed) fullSyncs(p *ipvsProxy, started time.Time, n float64) time.Duration {
	for {
		m, err := b.proxyMetrics()
		if err == nil && m[`ipvs_proxy_syncs_total{mode="full"}`] >= n {
			return time.Since(started)
		}
		if !p.Alive() || time.Since(started) > 2*time.Minute {
			b.t.Errorf("ipvs-proxy: fewer than %v full syncs %v after its start (metrics error %v)", n, time.Since(started).Round(time.Millisecond), err)
			return 0
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// takeover is step 2: under traffic, kube-proxy gets SIGTERM, ipvs-proxy
// starts with kube-proxy's configuration, becomes ready and runs its first
// full syncs. It returns the report.
func (b *bed) takeover(kp *kubeproxy.Process) string {
	t := b.t
	var rep strings.Builder
	before := b.dumpKernel("before-takeover.txt")
	ctBefore := b.conntrackStats()
	tr := b.startTraffic()
	time.Sleep(3 * time.Second) // traffic under kube-proxy alone
	ipvsMon := startIPVSMonitor(t, b.node.NS, 50*time.Millisecond)
	b.witness.ipvs.Store(ipvsMon)
	addrMon := startAddrMonitor(t, b.node.NS)

	start := time.Now()
	exitTook, err := kp.Stop(30 * time.Second)
	if err != nil {
		t.Errorf("kube-proxy after SIGTERM: %v", err)
	}
	freeAfter := b.healthzFree(30 * time.Second)
	p := b.startProxy(b.proxyConfig(), fmt.Sprintf("ipvs-proxy-%d.log", b.cycle+1))
	started := time.Now()

	// Ready: /healthz 200 (its first sync done); then the first full
	// syncs: the initial one and a periodic resync; then the kernel equals
	// the plan. A step that fails is reported and the later ones skipped,
	// so that the rollback still runs.
	ready, fullSyncs, conv := b.proxyReady(p, started), time.Duration(0), time.Duration(0)
	if ready > 0 {
		fullSyncs = b.fullSyncs(p, started, 2)
		if fullSyncs > 0 {
			fullSyncs += started.Sub(start)
			var diff string
			conv, diff = b.converge(time.Minute)
			if diff != "" {
				t.Errorf("the kernel does not hold what `ipvs-proxy plan` prints %v after the second full sync:\n%s", conv, diff)
			}
		}
	}
	time.Sleep(2 * time.Second) // traffic under ipvs-proxy alone
	ipvsEvents, ipvsReadded, polls, monErr := ipvsMon.end()
	addrEvents, addrReadded := addrMon.end()
	tr.end()
	ok, failed, stalled, traffic := tr.snapshot()
	after := b.dumpKernel("after-takeover.txt")
	m, err := b.proxyMetrics()
	if err != nil {
		t.Errorf("ipvs-proxy /metrics: %v", err)
	}

	fmt.Fprintf(&rep, "takeover: kube-proxy exited %v after SIGTERM, healthz port free %v after that; ipvs-proxy ready (/healthz 200) %v after its start, %v after the SIGTERM; two full syncs done %v after the SIGTERM; kernel equal to plan %v later\n",
		exitTook.Round(time.Millisecond), freeAfter.Round(time.Millisecond), ready.Round(time.Millisecond),
		(started.Sub(start) + ready).Round(time.Millisecond), fullSyncs.Round(time.Millisecond), conv.Round(time.Millisecond))
	fmt.Fprintf(&rep, "traffic through the takeover: %d requests and stream answers served, %d failed, %d excused (during a stall of the bed, or by the capture's verdict); %s\n%s",
		ok, failed, stalled, conntrackDelta(ctBefore, b.conntrackStats()), traffic)
	rep.WriteString(b.witness.summary(start))
	fmt.Fprintf(&rep, "ipvs-proxy metrics: syncs %v, apply errors %v, drift repairs %v\n",
		m.Sum("ipvs_proxy_syncs_total"), m.Sum("ipvs_proxy_apply_errors_total"), m.Sum("ipvs_proxy_drift_repairs_total"))
	for _, l := range p.syncLines() {
		fmt.Fprintf(&rep, "  sync applied: mode %v ipvsChanges %v bound %v unbound %v failedServices %v\n", l["mode"], l["ipvsChanges"], l["bound"], l["unbound"], l["failedServices"])
	}
	fmt.Fprintf(&rep, "IPVS monitor (/proc/net/ip_vs every 50 ms, %d polls): %d changes\n", polls, len(ipvsEvents))
	for _, e := range firstN(ipvsEvents, 40) {
		fmt.Fprintf(&rep, "  %s\n", e)
	}
	fmt.Fprintf(&rep, "address monitor (ip monitor address dev kube-ipvs0): %d events\n", len(addrEvents))
	for _, e := range firstN(addrEvents, 40) {
		fmt.Fprintf(&rep, "  %s\n", e)
	}
	fmt.Fprintf(&rep, "kernel before and after (ipset, iptables, ip6tables lines that differ):\n%s", changedLines(before, after, 80))

	if failed > 0 {
		t.Errorf("%d requests or stream answers failed through the takeover (%s):\n%s", failed, tr.failedTargets(), traffic)
	}
	if monErr != nil {
		t.Errorf("IPVS monitor: %v", monErr)
	}
	if len(ipvsReadded) > 0 {
		t.Errorf("virtual or real servers deleted and added again: %v", ipvsReadded)
	}
	if len(addrReadded) > 0 {
		t.Errorf("kube-ipvs0 addresses deleted and added again: %v", addrReadded)
	}
	if v := m.Sum("ipvs_proxy_apply_errors_total"); v != 0 {
		t.Errorf("ipvs_proxy_apply_errors_total %v, want 0", v)
	}
	if v := m.Sum("ipvs_proxy_drift_repairs_total"); v != 0 {
		t.Errorf("ipvs_proxy_drift_repairs_total %v after a takeover nobody tampered with, want 0", v)
	}
	b.denied()
	b.takeoverProxy = p
	return rep.String()
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

// changedLines lists the lines only in before ("-") or only in after ("+"),
// at most n.
func changedLines(before, after string, n int) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ":") {
				m[l]++
			}
		}
		return m
	}
	bm, am := count(before), count(after)
	var out []string
	for _, l := range strings.Split(before, "\n") {
		if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ":") && am[l] == 0 {
			out = append(out, "  - "+l)
		}
	}
	for _, l := range strings.Split(after, "\n") {
		if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ":") && bm[l] == 0 {
			out = append(out, "  + "+l)
		}
	}
	out = firstN(out, n)
	if len(out) == 0 {
		return "  (none)\n"
	}
	return strings.Join(out, "\n") + "\n"
}
