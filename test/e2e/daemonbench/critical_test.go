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

// Log lines of ipvs-proxy's critical Services (internal/drive/daemon/critical.go).
const (
	cachesSyncedMsg = "informer caches synced; starting the first full sync"
	criticalMsg     = "critical Services"
)

// criticalLog is what ipvs-proxy's JSON log says of its critical Services:
// when its caches synced, and the first line about the critical Services
// with the time it gives since then (its "sinceCachesSynced").
type criticalLog struct {
	cachesSynced time.Time
	msg          string
	since        time.Duration
}

func readCriticalLog(r io.Reader) criticalLog {
	var out criticalLog
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var rec struct {
			TS    string  `json:"ts"`
			Msg   string  `json:"msg"`
			Since float64 `json:"sinceCachesSynced"`
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		switch {
		case rec.Msg == cachesSyncedMsg && out.cachesSynced.IsZero():
			out.cachesSynced = parseLogTS(rec.TS)
		case strings.HasPrefix(rec.Msg, criticalMsg) && out.msg == "":
			out.msg, out.since = rec.Msg, time.Duration(rec.Since*float64(time.Second))
		}
	}
	return out
}

// parseLogTS reads zap's ISO8601 "ts" (RFC 3339 with milliseconds, Z or
// a numeric zone).
func parseLogTS(s string) time.Time {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.000Z0700"} {
		if ts, err := time.Parse(layout, s); err == nil {
			return ts
		}
	}
	return time.Time{}
}

// criticalFigure is the report's critical Services figure: when the
// kernel served default/kubernetes (served, zero when never) after the
// caches synced, and what the proxy's own line said.
func criticalFigure(l criticalLog, served time.Time) string {
	if l.cachesSynced.IsZero() {
		return "caches never synced"
	}
	kernel := "not seen in the kernel"
	if !served.IsZero() {
		kernel = fmt.Sprintf("%.2f s after the caches synced (kernel: default/kubernetes's virtual server with a real server, its ClusterIP bound)", served.Sub(l.cachesSynced).Seconds())
	}
	if l.msg == "" {
		return kernel + "; the proxy logged no critical Services line"
	}
	return fmt.Sprintf("%s; the proxy's line %q: %.2f s", kernel, l.msg, l.since.Seconds())
}

func TestCriticalFigure(t *testing.T) {
	log := `{"level":"info","ts":"2026-12-06T11:00:10.000Z","msg":"informer caches synced; starting the first full sync"}
{"level":"info","ts":"2026-12-06T11:00:10.900Z","msg":"critical Services served","services":["default/kubernetes"],"sinceCachesSynced":0.85,"took":0.4}
{"level":"info","ts":"2026-12-06T11:00:40.000Z","msg":"first full sync applied","took":30}
`
	l := readCriticalLog(strings.NewReader(log))
	served := time.Date(2026, 12, 6, 11, 0, 11, 200e6, time.UTC)
	want := `1.20 s after the caches synced (kernel: default/kubernetes's virtual server with a real server, its ClusterIP bound); the proxy's line "critical Services served": 0.85 s`
	if got := criticalFigure(l, served); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := criticalFigure(readCriticalLog(strings.NewReader("")), time.Time{}); got != "caches never synced" {
		t.Errorf("empty log: %s", got)
	}
}
