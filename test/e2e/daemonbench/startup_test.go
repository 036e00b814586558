package daemonbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// startupSteps are the log lines of ipvs-proxy's start, in order, with
// what the report calls them: where its time to the first complete sync
// goes (the binary's start, the informers' lists, the first sync).
var startupSteps = []struct{ msg, name string }{
	{"starting", "logging"},
	{"startup guard pass done", "guard pass"},
	{"informer caches synced; starting the first full sync", "caches synced"},
	{"first full sync applied", "first sync applied"},
}

// startupTimeline is when each of startupSteps was logged, since start
// (the harness's exec of the proxy), from its JSON log; steps not logged
// are left out.
func startupTimeline(r io.Reader, start time.Time) string {
	at := map[string]time.Time{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var rec struct {
			TS  string `json:"ts"`
			Msg string `json:"msg"`
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		if _, seen := at[rec.Msg]; seen {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, rec.TS); err == nil {
			at[rec.Msg] = ts
		}
	}
	var parts []string
	for _, s := range startupSteps {
		if ts, ok := at[s.msg]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f s", s.name, ts.Sub(start).Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

func TestStartupTimeline(t *testing.T) {
	start := time.Date(2026, 11, 27, 8, 40, 0, 0, time.UTC)
	log := `{"level":"info","ts":"2026-11-27T08:40:01.500Z","msg":"starting","version":"x"}
gc 1 @0.013s 15%: 0.026+0.13+0.003 ms clock, 0.052+0.076/0/0+0.006 ms cpu, 4->4->1 MB, 4 MB goal, 2 P
{"level":"info","ts":"2026-11-27T08:40:03.000Z","msg":"startup guard pass done","bound":0}
{"level":"info","ts":"2026-11-27T08:40:12.250Z","msg":"informer caches synced; starting the first full sync"}
{"level":"info","ts":"2026-11-27T08:40:40.000Z","msg":"first full sync applied","took":"27.7s"}
{"level":"info","ts":"2026-11-27T08:41:40.000Z","msg":"first full sync applied","took":"1s"}
`
	want := "logging 1.5 s, guard pass 3.0 s, caches synced 12.2 s, first sync applied 40.0 s"
	if got := startupTimeline(strings.NewReader(log), start); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
