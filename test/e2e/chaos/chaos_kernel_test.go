//go:build kernel

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/churn"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

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
	kills := churn.EnvInt(t, "CHAOS_KILLS", 3)
	seed := churn.EnvInt(t, "CHAOS_SEED", 1)
	nsvc := churn.EnvInt(t, "CHAOS_SERVICES", 20)
	bd := churn.NewBed(t, 0)
	client, client1, lan, e := bd.Client, bd.Pod, bd.LAN, bd.Env
	c := churn.NewCluster(t, client, rand.New(rand.NewPCG(uint64(seed), 11)), nsvc, 0)
	c.Setup()
	web := bd.WebAddr(t)
	webAddr := e.WebAddr

	var findings []string
	var convergeTimes []time.Duration
	churnErrs := 0
	leakedVS := 0

	// Kill -9 at random points while the churner changes objects.
	p := e.Start()
	for k := range kills {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := c.ChurnOnce(); err != nil && !apierrors.IsConflict(err) {
					churnErrs++
				}
				time.Sleep(time.Duration(50+c.Rng.IntN(200)) * time.Millisecond)
			}
		}()
		time.Sleep(time.Duration(c.Rng.IntN(4000)) * time.Millisecond)
		churn.Kill(t, p)
		stop()
		wg.Wait()
		p = e.Start()
		d, bad := e.Converge(c, p)
		convergeTimes = append(convergeTimes, d)
		if bad != "" {
			findings = append(findings, fmt.Sprintf("kill %d: %s", k+1, churn.FirstLines(bad, 12)))
			t.Logf("kill %d: %s", k+1, bad)
			// A leaked virtual server stays leaked: remove it by hand so
			// that the next kills are judged on their own.
			removed := e.RemoveLeakedVS(bad)
			leakedVS += removed
			if removed > 0 {
				if _, bad := e.Converge(c, p); bad != "" {
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
		if _, err := e.Run(tm.cmd[0], tm.cmd[1:]...); err != nil {
			findings = append(findings, fmt.Sprintf("tamper %q: %v", tm.name, err))
			continue
		}
		d, bad := e.Converge(c, p)
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
	_, metrics, err := e.Node.HTTPGet("127.0.0.1:10249", "/metrics", 10*time.Second)
	drift := driftRepairs(metrics)
	tamperTimes = append(tamperTimes, fmt.Sprintf("ipvs_proxy_drift_repairs_total after the tampers: %v (%v)", drift, err))
	for _, kind := range []string{"virtual_server", "address", "ipset_entry", "iptables_table"} {
		if drift[kind] < 1 {
			findings = append(findings, fmt.Sprintf("ipvs_proxy_drift_repairs_total{kind=%q} is %v after its tamper, want at least 1", kind, drift[kind]))
		}
	}
	churn.Kill(t, p)

	var b bytes.Buffer
	fmt.Fprintf(&b, "CHAOS-REPORT-BEGIN\nkills %d, seed %d, churned services %d, proxy runs %d, sync period %v, churn errors %d\n",
		kills, seed, nsvc, e.Runs, churn.SyncPeriod, churnErrs)
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
