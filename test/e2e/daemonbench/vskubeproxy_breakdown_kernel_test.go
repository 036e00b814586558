//go:build kernel

package daemonbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// stage is one step of ipvs-proxy's one-change path, as its debug lines
// time it (BENCHVS_BREAKDOWN=1): "sync done" of the sync loop, "sync
// applied" of the applier, both of the partial sync that applied the
// change.
type stage struct {
	name  string
	line  string // "done" or "applied"
	field string // the zap field, a duration in seconds
}

// stages are in the order of the path: the API write to the Watcher's
// handler (the trigger annotation the harness sets to the write's time),
// the loop's wake-up, the sync's steps up to the IPVS write, then those
// after it.
var stages = []stage{
	{"write → ipvs-proxy's informer handler", "done", "deliveredIn"},
	{"handler → sync start (loop wake-up)", "done", "waited"},
	{"node addresses and routes read", "done", "envTook"},
	{"planning (the changed service, the state)", "done", "planTook"},
	{"healthCheckNodePort servers", "done", "healthTook"},
	{"kube-ipvs0 check or dump", "applied", "dumpTook"},
	{"ownership journal", "applied", "journalTook"},
	{"unbind", "applied", "unbindTook"},
	{"IPVS step (the change's real server, then the old one quiesced, graceful ends)", "applied", "ipvsTook"},
	{"after the IPVS write: ipsets and iptables", "applied", "rulesTook"},
	{"after the IPVS write: bind", "applied", "bindTook"},
}

// beforeIPVS is the number of stages before the IPVS step. That step
// writes the change's new real server first, then quiesces the old one and
// ends graceful terminations due: the time from its start to the poll
// seeing the change is the harness's figure less these stages.
const beforeIPVS = 8

// breakdown is the per-change time of each stage, in the changes' order.
type breakdown struct {
	// per[i][k] is stage i of change k.
	per [][]time.Duration
	// took is the loop's own duration of each change's sync.
	took []time.Duration
	// full[i] is stage i (of fullStages) of every full sync after the
	// first: the periodic ones a change may wait for.
	full [][]time.Duration
	// first is each stage (of fullStages) of the first full sync, the one
	// that programs the kernel: where the time to the first complete sync
	// goes after the caches are synced.
	first [][]time.Duration
	// turns are the partial syncs those full syncs ran inside them for
	// changes that arrived meanwhile (the full sync in turns), and
	// turned how many of them ran any.
	turns, turned int
	// replanned is how many of those planned every service again (a
	// changed node, as the loop read it) rather than reading the
	// incremental plan.
	replanned int
	// synced is when each change's partial sync ran, and reads when
	// each periodic full sync's read beside the loop ran (it ends as
	// that full sync begins), both from the log's timestamps: a change
	// whose sync met a read shares the VM with it.
	synced, reads []span
}

// span is a stretch of time in ipvs-proxy's log.
type span struct{ from, to time.Time }

func (a span) overlaps(b span) bool { return a.from.Before(b.to) && b.from.Before(a.to) }

// fullStages split a full sync, from its "sync done" and "sync applied"
// lines.
var fullStages = []stage{
	{"the sync's own duration (its histogram)", "done", "took"},
	{"node addresses and routes read", "done", "envTook"},
	{"planning", "done", "planTook"},
	{"kube-ipvs0 dump", "applied", "dumpTook"},
	{"ownership journal", "applied", "journalTook"},
	{"the read beside the loop: IPVS, kube-ipvs0, ipsets, iptables-save (not in the duration)", "applied", "readbackTook"},
	{"— of which IPVS (GET_SERVICE dump, /proc/net/ip_vs)", "applied", "readIPVSTook"},
	{"— of which kube-ipvs0", "applied", "readAddrsTook"},
	{"— of which ipsets and iptables-save", "applied", "readRulesTook"},
	{"the node's addresses and routes read beside the loop (not in the duration)", "done", "readEnvTook"},
	{"IPVS step (the comparison with the read, repairs; the dump too when the sync read it itself)", "applied", "ipvsTook"},
	{"ipsets and iptables (read back, compared, repaired)", "applied", "rulesTook"},
	{"bind", "applied", "bindTook"},
}

// readBreakdown reads ipvs-proxy's JSON log (at debug level) and returns
// the stages of the partial syncs that applied one of the harness's
// changes (their deliveredIn is set: the changes carry the trigger
// annotation, the objects as created do not), in order.
func readBreakdown(t *testing.T, path string) breakdown {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b breakdown
	b.per = make([][]time.Duration, len(stages))
	b.full = make([][]time.Duration, len(fullStages))
	b.first = make([][]time.Duration, len(fullStages))
	// applied is each mode's last "sync applied" line, waiting for its
	// "sync done".
	applied := map[string]map[string]any{}
	fulls := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := string(sc.Bytes())
		mode := "partial"
		if strings.Contains(line, `"mode":"full"`) {
			mode = "full"
		} else if !strings.Contains(line, `"mode":"partial"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m["msg"] == "sync applied" {
			applied[mode] = m
			continue
		}
		if m["msg"] != "sync done" {
			continue
		}
		a := applied[mode]
		delete(applied, mode)
		if mode == "full" {
			if fulls++; fulls == 1 && a != nil {
				collect(b.first, fullStages, m, a)
			} else if fulls > 1 && a != nil {
				collect(b.full, fullStages, m, a)
				begun := logTime(m).Add(-seconds(m, "took"))
				b.reads = append(b.reads, span{begun.Add(-seconds(a, "readbackTook")), begun})
				if m["replanned"] == true {
					b.replanned++
				}
				if n, _ := m["turns"].(float64); n > 0 {
					b.turns += int(n)
					b.turned++
				}
			}
		} else if d, _ := m["deliveredIn"].(float64); d > 0 && a != nil {
			collect(b.per, stages, m, a)
			b.took = append(b.took, seconds(m, "took"))
			b.synced = append(b.synced, span{logTime(m).Add(-seconds(m, "took")), logTime(m)})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return b
}

// collect appends each stage's field, from one sync's "sync done" line
// (done) or its "sync applied" line (applied), to dst[i].
func collect(dst [][]time.Duration, ss []stage, done, applied map[string]any) {
	for i, s := range ss {
		src := done
		if s.line == "applied" {
			src = applied
		}
		dst[i] = append(dst[i], seconds(src, s.field))
	}
}

// breakdownReport is the table of the stages' p50 and mean next to the
// harness's figures for the same changes, unsorted, in the changes' order:
// lat (write → the poll saw it), floor (write → the bare informer's
// handler) and answered (write → the API server's answer). The rest, after the IPVS write until the poll saw it,
// is lat minus the stages before the IPVS step, change by change.
func breakdownReport(b breakdown, lat, floor, answered []time.Duration) string {
	var out strings.Builder
	n := len(b.took)
	fmt.Fprintf(&out, "BENCHVS-BREAKDOWN-BEGIN\nipvs-proxy one change, stage by stage (%d partial syncs matched to %d changes)\n", n, len(lat))
	if n != len(lat) {
		fmt.Fprintf(&out, "(the counts differ: a change applied by a sync without its trigger, or a retry; the rest row is left out)\n")
	}
	out.WriteString("| Stage | p50 | mean |\n|---|---|---|\n")
	row := func(name string, d []time.Duration) {
		if len(d) == 0 {
			return
		}
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		fmt.Fprintf(&out, "| %s | %s | %s |\n", name, us(quantile(sorted(d), 0.5)), us(sum/time.Duration(len(d))))
	}
	row("write → the API server's answer to the harness", answered)
	row("floor: write → bare informer's handler", floor)
	for i, s := range stages {
		row(s.name, b.per[i])
	}
	row("the sync's own duration (its histogram)", b.took)
	if n == len(lat) {
		rest := make([]time.Duration, n)
		for k := range rest {
			rest[k] = lat[k]
			for i := 0; i < beforeIPVS; i++ {
				rest[k] -= b.per[i][k]
			}
		}
		row("IPVS step's start → the harness's poll saw it", rest)
	}
	row("end to end: write → the poll saw it", lat)
	if n == len(lat) && len(b.reads) > 0 {
		out.WriteString(duringReads(b, lat, floor))
	}
	if len(b.full[0]) > 0 {
		fmt.Fprintf(&out, "\nipvs-proxy's full syncs after the first (%d: the periodic ones, from the start to the end of the changes; %d planned every service again; %d gave changes that arrived meanwhile %d turns, their time in the sync's own duration)\n", len(b.full[0]), b.replanned, b.turned, b.turns)
		out.WriteString("| Stage | p50 | mean |\n|---|---|---|\n")
		for i, s := range fullStages {
			row(s.name, b.full[i])
		}
	}
	if len(b.first[0]) > 0 {
		// The stages of the read beside the loop are those of the
		// periodic syncs only: left out rather than shown as zeros.
		out.WriteString("\nipvs-proxy's first full sync (the stages it had)\n| Stage | time |\n|---|---|\n")
		for i, s := range fullStages {
			if d := b.first[i][0]; d > 0 {
				fmt.Fprintf(&out, "| %s | %s |\n", s.name, us(d))
			}
		}
	}
	out.WriteString("BENCHVS-BREAKDOWN-END\n")
	return out.String()
}

// duringReads splits the changes by whether their partial sync ran while
// a periodic full sync's read beside the loop was under way: each group's
// count, end-to-end p50 and largest, IPVS step p50 and the floor's p50 of
// the same changes.
func duringReads(b breakdown, lat, floor []time.Duration) string {
	var in, apart [3][]time.Duration // lat, IPVS step, floor
	ipvsStep := b.per[beforeIPVS]
	for k, sp := range b.synced {
		g := &apart
		if slices.ContainsFunc(b.reads, sp.overlaps) {
			g = &in
		}
		g[0], g[1], g[2] = append(g[0], lat[k]), append(g[1], ipvsStep[k]), append(g[2], floor[k])
	}
	var took []time.Duration
	for _, r := range b.reads {
		took = append(took, r.to.Sub(r.from))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nchanges whose partial sync ran during a read beside the loop (%d reads, %s each p50)\n", len(b.reads), us(quantile(sorted(took), 0.5)))
	sb.WriteString("| changes | n | end to end p50 / largest | IPVS step p50 | floor p50 |\n|---|---|---|---|---|\n")
	for _, g := range []struct {
		name string
		d    [3][]time.Duration
	}{{"during a read", in}, {"no read under way", apart}} {
		if len(g.d[0]) == 0 {
			fmt.Fprintf(&sb, "| %s | 0 | — | — | — |\n", g.name)
			continue
		}
		l, st, fl := sorted(g.d[0]), sorted(g.d[1]), sorted(g.d[2])
		fmt.Fprintf(&sb, "| %s | %d | %s / %s | %s | %s |\n", g.name, len(l), us(quantile(l, 0.5)), us(l[len(l)-1]), us(quantile(st, 0.5)), us(quantile(fl, 0.5)))
	}
	return sb.String()
}

// sorted is a sorted copy of d, for quantile.
func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// warnings are the first n lines of ipvs-proxy's JSON log at warn level
// or above, each cut to 600 bytes.
func warnings(t *testing.T, path string, n int) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() && len(out) < n {
		line := sc.Text()
		if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
			out = append(out, line[:min(len(line), 600)])
		}
	}
	return out
}
