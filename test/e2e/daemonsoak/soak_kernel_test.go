//go:build kernel

package daemonsoak

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/churn"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/consoleprof"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// loop sends requests to one steady address until stop, counting answers
// from the steady service's pods and everything else as failures.
type loop struct {
	name     string
	from     *ktest.NS
	addr     string
	ok, fail atomic.Int64
	mu       sync.Mutex
	first    []string // the first failures, with their time
}

func (l *loop) run(stop <-chan struct{}, start time.Time) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		out, err := l.from.Request(ktest.TCP, l.addr)
		if err == nil && (strings.HasPrefix(out, "pod-a ") || strings.HasPrefix(out, "pod-b ")) {
			l.ok.Add(1)
		} else {
			l.fail.Add(1)
			l.mu.Lock()
			if len(l.first) < 5 {
				l.first = append(l.first, fmt.Sprintf("at %v: %q %v", time.Since(start).Round(time.Second), out, err))
			}
			l.mu.Unlock()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sample is the proxy's state at one check of the soak.
type sample struct {
	at                 time.Duration
	converged          time.Duration
	rss, hwm           float64 // MiB, /proc/PID/status
	goroutines         float64
	heap               float64 // MiB, go_memstats_heap_inuse_bytes
	full, partial, err float64 // syncs_total by mode; apply_errors_total
}

// procStatusMiB reads a "VmRSS:  1234 kB" line of /proc/PID/status in MiB.
func procStatusMiB(pid int, key string) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return -1
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, key+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// notDebug keeps the lines of a JSON log that are not at debug level.
func notDebug(log string) string {
	var b strings.Builder
	for l := range strings.Lines(log) {
		if !strings.Contains(l, `"level":"debug"`) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestDaemonSoakGuest is the VM half of TestDaemonSoak: `ipvs-proxy run`
// with its default sync period against DSOAK_SERVICES Services of
// DSOAK_ENDPOINTS endpoints, churned for DSOAK_DURATION of churn, with
// requests to a steady Service throughout; after every DSOAK_CHECK of it
// the churn pauses, the kernel must equal `ipvs-proxy plan` and the proxy's memory and
// goroutines are sampled.
func TestDaemonSoakGuest(t *testing.T) {
	nsvc := churn.EnvInt(t, "DSOAK_SERVICES", 1000)
	eps := churn.EnvInt(t, "DSOAK_ENDPOINTS", 10)
	seed := churn.EnvInt(t, "DSOAK_SEED", 1)
	duration, err := time.ParseDuration(vmtest.GuestEnv(t, "DSOAK_DURATION"))
	if err != nil {
		t.Fatal(err)
	}
	every, err := time.ParseDuration(vmtest.GuestEnv(t, "DSOAK_CHECK"))
	if err != nil {
		t.Fatal(err)
	}
	// A request fails without a right answer within 10 s, as in package
	// soak: under TCG on a loaded host answers took seconds.
	ktest.RequestTimeout = 10 * time.Second
	bd := churn.NewBed(t, 200)
	client, node, client1, lan, e := bd.Client, bd.Node, bd.Pod, bd.LAN, bd.Env
	// The proxy's defaults: full syncs every 30 s run during the churn.
	e.SyncPeriod, e.ConvergeTimeout = 30*time.Second, 10*time.Minute
	e.Profiling = os.Getenv("DSOAK_PROFILES") != ""
	c := churn.NewCluster(t, client, rand.New(rand.NewPCG(uint64(seed), 13)), nsvc, eps)
	began := time.Now()
	c.Setup()
	bd.WebAddr(t)
	t.Logf("%d services × %d endpoints created in %v", nsvc, eps, time.Since(began).Round(time.Second))

	p := e.Start()
	var findings []string
	var samples []sample
	start := time.Now()
	logMark := 0
	check := func() {
		d, bad := e.Converge(c, p)
		s := sample{at: time.Since(start), converged: d}
		if d > 2*e.SyncPeriod && bad == "" {
			t.Logf("check at %v: slow convergence (%v); the last difference before it:\n%s\nthe proxy's log since the last check, above debug:\n%s",
				s.at.Round(time.Second), d, churn.FirstLines(e.LastDiff, 30), churn.FirstLines(notDebug(p.Output()[logMark:]), 60))
		}
		logMark = len(p.Output())
		if bad != "" {
			findings = append(findings, fmt.Sprintf("check at %v: %s", s.at.Round(time.Second), churn.FirstLines(bad, 12)))
			t.Logf("check at %v: %s", s.at.Round(time.Second), bad)
		}
		pid := p.Cmd.Process.Pid
		s.rss, s.hwm = procStatusMiB(pid, "VmRSS"), procStatusMiB(pid, "VmHWM")
		_, text, err := node.HTTPGet("127.0.0.1:10249", "/metrics", 30*time.Second)
		var m kubeproxy.Metrics
		if err == nil {
			m, err = kubeproxy.ParseMetrics(text)
		}
		if err != nil {
			findings = append(findings, fmt.Sprintf("check at %v: /metrics: %v", s.at.Round(time.Second), err))
		}
		if os.Getenv("DSOAK_PROFILES") != "" {
			// The live heap at this check (after a collection), for the host
			// to save.
			code, prof, err := node.HTTPGet("127.0.0.1:10249", "/debug/pprof/heap?gc=1", 2*time.Minute)
			if err == nil && code != 200 {
				err = fmt.Errorf("HTTP %d", code)
			}
			if err == nil {
				err = consoleprof.Print(os.Stdout, fmt.Sprintf("heap-check-%d", len(samples)+1), []byte(prof))
			}
			if err != nil {
				findings = append(findings, fmt.Sprintf("check at %v: heap profile: %v", s.at.Round(time.Second), err))
			}
		}
		s.goroutines = m["go_goroutines"]
		s.heap = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
		s.full = m[`ipvs_proxy_syncs_total{mode="full"}`]
		s.partial = m[`ipvs_proxy_syncs_total{mode="partial"}`]
		s.err = m.Sum("ipvs_proxy_apply_errors_total")
		samples = append(samples, s)
		t.Logf("check at %v: converged in %v, RSS %.1f MiB (peak %.1f), heap %.1f MiB, goroutines %.0f, syncs full %.0f partial %.0f, apply errors %.0f",
			s.at.Round(time.Second), d.Round(10*time.Millisecond), s.rss, s.hwm, s.heap, s.goroutines, s.full, s.partial, s.err)
	}
	check() // the first full sync: the baseline
	start = time.Now()

	loops := []*loop{
		{name: "ClusterIP from a pod", from: client1.NS, addr: e.WebAddr},
		{name: "NodePort from the LAN", from: lan.NS, addr: "198.51.100.1:30080"},
		{name: "externalIP from the LAN", from: lan.NS, addr: "203.0.113.10:80"},
	}
	stopLoops := make(chan struct{})
	var lwg sync.WaitGroup
	for _, l := range loops {
		lwg.Add(1)
		go func() { defer lwg.Done(); l.run(stopLoops, start) }()
	}

	changes, churnErrs := 0, 0
	// duration is the churn's own time: the checks, which pause it for
	// minutes at 10,000 services, do not count.
	var churned time.Duration
	for churned < duration {
		began := time.Now()
		ctx, stop := context.WithTimeout(context.Background(), min(every, duration-churned))
		for ctx.Err() == nil {
			if err := c.ChurnSoak(eps); err != nil && !apierrors.IsConflict(err) {
				churnErrs++
				if churnErrs <= 3 {
					t.Logf("churn: %v", err)
				}
			}
			changes++
			time.Sleep(time.Duration(50+c.Rng.IntN(200)) * time.Millisecond)
		}
		stop()
		churned += time.Since(began)
		if !p.Alive() {
			findings = append(findings, "proxy exited: "+p.Tail(20))
			break
		}
		check()
	}
	close(stopLoops)
	lwg.Wait()
	_, _ = p.Stop(30 * time.Second)

	// Flat: every later sample within the first's RSS × 1.25 + 8 MiB and
	// its goroutines + 2 (the metrics scrape's own connection may be open).
	base := samples[0]
	if len(samples) > 1 {
		base = samples[1] // after the first churn: the informers' and mirrors' working size
	}
	for _, s := range samples[1:] {
		if s.rss > base.rss*1.25+8 {
			findings = append(findings, fmt.Sprintf("RSS at %v: %.1f MiB, above %.1f × 1.25 + 8", s.at.Round(time.Second), s.rss, base.rss))
		}
		if s.goroutines > base.goroutines+2 {
			findings = append(findings, fmt.Sprintf("goroutines at %v: %.0f, above %.0f + 2", s.at.Round(time.Second), s.goroutines, base.goroutines))
		}
	}
	last := samples[len(samples)-1]
	if last.err > 0 {
		findings = append(findings, fmt.Sprintf("apply errors: %.0f", last.err))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "DSOAK-REPORT-BEGIN\nservices %d × %d endpoints, seed %d, churn %v (%d changes, %d errors), checks every %v of churn, %v in all\n",
		nsvc, eps, seed, churned.Round(time.Second), changes, churnErrs, every, time.Since(start).Round(time.Second))
	for _, l := range loops {
		ok, fail := l.ok.Load(), l.fail.Load()
		if fail > 0 {
			findings = append(findings, fmt.Sprintf("%s %s: %d of %d requests failed: %s", l.name, l.addr, fail, ok+fail, strings.Join(l.first, "; ")))
		}
		fmt.Fprintf(&b, "%s (%s): %d answered, %d failed\n", l.name, l.addr, ok, fail)
	}
	fmt.Fprintln(&b, "check | converged | RSS MiB | peak MiB | heap MiB | goroutines | full syncs | partial syncs | apply errors")
	for _, s := range samples {
		fmt.Fprintf(&b, "%v | %v | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f\n", s.at.Round(time.Second),
			s.converged.Round(10*time.Millisecond), s.rss, s.hwm, s.heap, s.goroutines, s.full, s.partial, s.err)
	}
	fmt.Fprintf(&b, "findings: %d\n", len(findings))
	for _, f := range findings {
		fmt.Fprintln(&b, "  "+f)
	}
	fmt.Fprintln(&b, "DSOAK-REPORT-END")
	t.Log("\n" + b.String())
	if len(findings) > 0 {
		t.Errorf("daemon soak: %d findings; first: %s", len(findings), churn.FirstLines(findings[0], 1))
	}
}
