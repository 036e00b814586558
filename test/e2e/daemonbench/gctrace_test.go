package daemonbench

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// gcLine matches a line of GODEBUG=gctrace=1: "gc 12 @3.456s 2%: ...,
// 45->46->23 MB, 47 MB goal, ...": the heap when the collection began,
// when it ended, and what was live.
var gcLine = regexp.MustCompile(`^gc (\d+) @([0-9.]+)s .* (\d+)->(\d+)->(\d+) MB, (\d+) MB goal`)

// gcSample is one collection of the trace.
type gcSample struct {
	at                     time.Duration // since the process started
	begin, end, live, goal int           // MB
}

// parseGCTrace reads the collections from the proxy's log (stderr and the
// JSON log share the file); other lines are skipped.
func parseGCTrace(r io.Reader) []gcSample {
	var out []gcSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		m := gcLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		secs, _ := strconv.ParseFloat(m[2], 64)
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		out = append(out, gcSample{at: time.Duration(secs * float64(time.Second)), begin: n(3), end: n(4), live: n(5), goal: n(6)})
	}
	return out
}

// gcSummary is the trace in a few figures: how many collections, the
// largest heap one began at (which sets the peak) and what was live
// after it, the largest live heap, and the last.
func gcSummary(gcs []gcSample) string {
	if len(gcs) == 0 {
		return "no collections traced (GODEBUG=gctrace=1 lines missing from the log)\n"
	}
	top, live := gcs[0], gcs[0]
	for _, g := range gcs {
		if g.begin > top.begin {
			top = g
		}
		if g.live > live.live {
			live = g
		}
	}
	last := gcs[len(gcs)-1]
	var b strings.Builder
	fmt.Fprintf(&b, "collections: %d; largest heap at a collection's start %d MB at %v (live after it %d MB, goal %d MB)\n",
		len(gcs), top.begin, top.at.Round(time.Second), top.live, top.goal)
	fmt.Fprintf(&b, "largest live heap %d MB at %v; last %d MB at %v\n", live.live, live.at.Round(time.Second), last.live, last.at.Round(time.Second))
	return b.String()
}

func TestGCTrace(t *testing.T) {
	log := `{"level":"info","msg":"watching"}
gc 1 @0.013s 15%: 0.026+0.13+0.003 ms clock, 0.052+0.076/0/0+0.006 ms cpu, 71->72->40 MB, 72 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 2 @95.5s 10%: 0.13+6.0+0.019 ms clock, 0.26+0.006/0.063/2.2+0.039 ms cpu, 141->175->90 MB, 144 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 3 @200.2s 10%: 0.034+0.17+0.002 ms clock, 0.068+0/0.080/0.074+0.005 ms cpu, 120->121->95 MB, 135 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)
`
	gcs := parseGCTrace(strings.NewReader(log))
	if len(gcs) != 3 || gcs[1] != (gcSample{at: 95500 * time.Millisecond, begin: 141, end: 175, live: 90, goal: 144}) {
		t.Fatalf("parsed %+v", gcs)
	}
	want := "collections: 3; largest heap at a collection's start 141 MB at 1m36s (live after it 90 MB, goal 144 MB)\n" +
		"largest live heap 95 MB at 3m20s; last 95 MB at 3m20s\n"
	if got := gcSummary(gcs); got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
	if got := gcSummary(nil); !strings.Contains(got, "no collections") {
		t.Errorf("empty trace: %q", got)
	}
}
