//go:build kernel

package takeover

import (
	"bufio"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// listenEcho starts, in pod p, a TCP backend on streamPort that keeps each
// connection open and answers every line with "NAME LINE": the far end of
// the long-lived connections a takeover must not reset.
func listenEcho(t *testing.T, p *ktest.Pod) {
	t.Helper()
	var ln net.Listener
	if err := p.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", streamPort))
		return err
	}); err != nil {
		t.Fatalf("pod %s: echo listener: %v", p.Name, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewScanner(c)
				for r.Scan() {
					if _, err := fmt.Fprintf(c, "%s %s\n", p.Name, r.Text()); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// target is one address a request loop or a stream exercises.
type target struct {
	name  string
	from  *ktest.NS
	proto ktest.Proto
	addr  string
	// want is the set of backends allowed to answer ("pod-a", "pod-b").
	want []string
}

// counter counts one target's requests.
type counter struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	// failures are the time spans of the failed requests (all of them).
	failures []span
	// slow, on a control target only, are the spans of its requests that
	// failed or took longer than stallAfter: the bed's stalls.
	slow []span
}

func (c *counter) fail(s span, msg string) {
	c.failed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, s)
	if len(c.errs) < 5 {
		c.errs = append(c.errs, s.from.Format("15:04:05.000")+"–"+s.to.Format("15:04:05.000")+" "+msg)
	}
}

func (c *counter) observe(s span, failed bool) {
	if !failed && s.to.Sub(s.from) <= stallAfter {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slow = append(c.slow, s)
}

// traffic runs the request loops and holds the long-lived connections
// until stop.
type traffic struct {
	loops   map[string]*counter
	streams map[string]*counter
	// controls are requests straight to a pod, which no proxy handles: the
	// bed's own health, against which a failure is judged (see verdict).
	controls map[string]*counter
	mu       sync.Mutex
	// stalls are the watchdog's oversleeps (see watch).
	stalls []span
	// explain, when set, returns the evidence about a failed request and
	// the capture's verdict on it (witness.explain); evidence is what it
	// returned, bedFailures the spans it put on the bed, verdicts the
	// verdict of each span explained.
	explain     func(target, span, error) (string, verdict)
	evidence    []string
	bedFailures []span
	verdicts    map[span]string
	// hiccups are the watchdog's oversleeps over hiccupAfter.
	hiccups []span
	stop    chan struct{}
	wg      sync.WaitGroup
}

// request sends one request of tg's loop: TCP through requestTCP, whose
// errors name the local endpoint, a failed dial's too (see explain).
func (tg target) request() (string, error) {
	if tg.proto == ktest.TCP {
		return requestTCP(tg.from, tg.addr)
	}
	return tg.from.Request(tg.proto, tg.addr)
}

func answeredBy(out string, want []string) bool {
	name, _, _ := strings.Cut(out, " ")
	for _, w := range want {
		if name == w {
			return true
		}
	}
	return false
}

// startTraffic starts one request loop per loop target (a new connection,
// or datagram, per request, one every interval) and one long-lived
// connection per stream target sending a line every interval.
// explain, when not nil, is asked about every failed request (see
// traffic.explain).
func startTraffic(t *testing.T, loops, streams, controls []target, interval time.Duration, explain func(target, span, error) (string, verdict)) *traffic {
	t.Helper()
	tr := &traffic{loops: map[string]*counter{}, streams: map[string]*counter{}, controls: map[string]*counter{},
		explain: explain, verdicts: map[span]string{}, stop: make(chan struct{})}
	tr.wg.Add(1)
	go tr.watch()
	for i, tg := range slices.Concat(loops, controls) {
		c := &counter{}
		if i >= len(loops) {
			tr.controls[tg.name] = c
		} else {
			tr.loops[tg.name] = c
		}
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			for {
				select {
				case <-tr.stop:
					return
				default:
				}
				from := time.Now()
				out, err := tg.request()
				s := span{from, time.Now()}
				switch {
				case err != nil:
					c.fail(s, err.Error())
					tr.explainAsync(tg, s, err)
				case !answeredBy(out, tg.want):
					c.fail(s, fmt.Sprintf("%s answered %q, want one of %v", tg.addr, out, tg.want))
				default:
					c.ok.Add(1)
				}
				c.observe(s, err != nil)
				time.Sleep(interval)
			}
		}()
	}
	for _, tg := range streams {
		var conn net.Conn
		if err := tg.from.Do(func() error {
			var err error
			conn, err = net.DialTimeout("tcp", tg.addr, 5*time.Second)
			return err
		}); err != nil {
			t.Fatalf("stream %s: dial %s: %v", tg.name, tg.addr, err)
		}
		c := &counter{}
		tr.streams[tg.name] = c
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			defer conn.Close()
			r := bufio.NewReader(conn)
			backend := ""
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				from := time.Now()
				_ = conn.SetDeadline(from.Add(5 * time.Second))
				if _, err := fmt.Fprintf(conn, "ping %d\n", i); err != nil {
					c.fail(span{from, time.Now()}, fmt.Sprintf("write: %v", err))
					return
				}
				line, err := r.ReadString('\n')
				if err != nil {
					// A reset or a timeout ends the connection: counted once.
					sp := span{from, time.Now()}
					c.fail(sp, fmt.Sprintf("read after %d answers: %v", c.ok.Load(), err))
					tr.explainAsync(tg, sp, err)
					return
				}
				name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
				if backend == "" {
					backend = name
				}
				if name != backend || rest != fmt.Sprintf("ping %d", i) {
					c.fail(span{from, time.Now()}, fmt.Sprintf("answer %q from %s, want %q from %s", line, name, fmt.Sprintf("ping %d", i), backend))
					return
				}
				c.ok.Add(1)
				time.Sleep(interval)
			}
		}()
	}
	return tr
}

// snapshot is the counts so far: requests and stream answers served;
// those that failed while the bed was running normally (failed: the
// proxies' doing); those that failed during a stall of the bed (stalled:
// the span of the failure overlaps one of the watchdog's or a slow
// control request's, see watch); and a line per target.
//
// A failed control request (a pod reached at its own address, through no
// virtual server) is counted in failed: a proxy that breaks pod-to-pod
// traffic is the worst failure, not an excuse. Only the watchdog's
// oversleeps excuse one: the guest was not running then, so its request
// timed out whatever the proxies did (a control's own slow requests would
// excuse themselves).
func (tr *traffic) snapshot() (ok, failed, stalled int64, report string) {
	var b strings.Builder
	ex := tr.excuses()
	for _, set := range []struct {
		kind string
		m    map[string]*counter
	}{{"loop", tr.loops}, {"stream", tr.streams}, {"control", tr.controls}} {
		for _, name := range slices.Sorted(maps.Keys(set.m)) {
			c := set.m[name]
			c.mu.Lock()
			st, bedOnly := ex.of(c, set.kind == "control")
			o, f := c.ok.Load(), c.failed.Load()
			ok += o
			failed += f - st
			stalled += st
			fmt.Fprintf(&b, "  %s %-28s ok %5d failed %d", set.kind, name, o, f)
			if st > 0 {
				fmt.Fprintf(&b, " (%d excused: during a stall of the bed, or %d by the capture's verdict, see the evidence)", st, bedOnly)
			}
			if len(c.errs) > 0 {
				fmt.Fprintf(&b, ": %s", strings.Join(c.errs, "; "))
			}
			c.mu.Unlock()
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "  stalls of the bed (watchdog oversleeps or control requests over %v): %d", stallAfter, len(ex.stalls))
	for i, s := range ex.stalls {
		if i == 5 {
			fmt.Fprintf(&b, "; ... %d more", len(ex.stalls)-i)
			break
		}
		fmt.Fprintf(&b, "; %s–%s", s.from.Format("15:04:05.000"), s.to.Format("15:04:05.000"))
	}
	b.WriteString("\n")
	tr.mu.Lock()
	for _, e := range firstN(tr.evidence, 5) {
		b.WriteString(e)
	}
	tr.mu.Unlock()
	return ok, failed, stalled, b.String()
}

// failedTargets is one line naming every target with a failure not
// excused, with its count, first error and that failure's verdict: the
// line the VM's failure digest repeats, so that a CI log cut to its tail
// still says what failed and what the capture saw.
func (tr *traffic) failedTargets() string {
	ex := tr.excuses()
	tr.mu.Lock()
	verdicts := maps.Clone(tr.verdicts)
	tr.mu.Unlock()
	var parts []string
	for _, m := range []map[string]*counter{tr.loops, tr.streams, tr.controls} {
		for _, name := range slices.Sorted(maps.Keys(m)) {
			c := m[name]
			c.mu.Lock()
			_, control := tr.controls[name]
			st, _ := ex.of(c, control)
			n := c.failed.Load() - st
			if n > 0 {
				first := ""
				if len(c.errs) > 0 {
					first = ", first " + c.errs[0]
				}
				if len(c.failures) > 0 && verdicts[c.failures[0]] != "" {
					first += ", verdict: " + verdicts[c.failures[0]]
				}
				parts = append(parts, fmt.Sprintf("%s: %d%s", name, n, first))
			}
			c.mu.Unlock()
		}
	}
	return strings.Join(parts, "; ")
}

// excuser holds what excuses a failure: the bed's stalls (stallSpans),
// the watchdog's oversleeps alone, and the failures the capture's verdict
// put on the bed.
type excuser struct{ stalls, watchdog, bed []span }

func (tr *traffic) excuses() excuser {
	stalls := tr.stallSpans()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return excuser{stalls: stalls, watchdog: slices.Clone(tr.stalls), bed: slices.Clone(tr.bedFailures)}
}

// of counts c's excused failures (st) and of those the ones the capture's
// verdict put on the bed (bedOnly). A control request (straight to a pod)
// is excused only by the watchdog: its own slow requests are among the
// stalls, and would excuse themselves.
func (e excuser) of(c *counter, control bool) (st, bedOnly int64) {
	if control {
		return int64(duringStalls(c.failures, e.watchdog)), 0
	}
	bedOnly = int64(bedFailures(c.failures, e.stalls, e.bed))
	return int64(duringStalls(c.failures, e.stalls)) + bedOnly, bedOnly
}

// stallSpans are the spans in which the bed itself stalled: the
// watchdog's oversleeps and the control requests that took over
// stallAfter.
func (tr *traffic) stallSpans() []span {
	tr.mu.Lock()
	out := slices.Clone(tr.stalls)
	tr.mu.Unlock()
	for _, c := range tr.controls {
		c.mu.Lock()
		out = append(out, c.slow...)
		c.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b span) int { return a.from.Compare(b.from) })
	return out
}

// watch is the bed's watchdog: a goroutine that sleeps 20 ms at a time
// and records every sleep that overran by more than stallAfter. Such an
// overrun means the guest did not run the test's goroutines (the emulated
// VM starved by a loaded host), and a request timing out meanwhile says
// nothing about the proxy. It runs until tr.stop.
func (tr *traffic) watch() {
	defer tr.wg.Done()
	for {
		from := time.Now()
		select {
		case <-tr.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		to := time.Now()
		if over := to.Sub(from) - 20*time.Millisecond; over > hiccupAfter {
			tr.mu.Lock()
			tr.hiccups = append(tr.hiccups, span{from, to})
			if to.Sub(from) > stallAfter {
				tr.stalls = append(tr.stalls, span{from, to})
			}
			tr.mu.Unlock()
		}
	}
}

// explainAsync records the evidence about one failure without holding up
// the loop; end waits for it.
func (tr *traffic) explainAsync(tg target, s span, err error) {
	if tr.explain == nil {
		return
	}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		if e, v := tr.explain(tg, s, err); e != "" {
			tr.mu.Lock()
			tr.evidence = append(tr.evidence, e)
			tr.verdicts[s] = v.why
			if v.excused() {
				tr.bedFailures = append(tr.bedFailures, s)
			}
			tr.mu.Unlock()
		}
	}()
}

// oversleptDuring sums the watchdog's oversleeps over hiccupAfter that
// overlap s.
func (tr *traffic) oversleptDuring(s span) time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var d time.Duration
	for _, h := range tr.hiccups {
		if h.overlaps(s) {
			d += h.to.Sub(h.from) - 20*time.Millisecond
		}
	}
	return d
}

// end stops every loop and closes the streams.
func (tr *traffic) end() {
	close(tr.stop)
	tr.wg.Wait()
}
