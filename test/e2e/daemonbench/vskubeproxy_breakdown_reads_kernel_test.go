//go:build kernel

package daemonbench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDuringReads: a change whose partial sync ran while a periodic full
// sync's read beside the loop was under way is counted apart from one
// that ran after the read; the read ends as its full sync begins.
func TestDuringReads(t *testing.T) {
	const log = `{"level":"debug","ts":"2026-12-02T07:00:10.000Z","msg":"sync applied","mode":"full"}
{"level":"debug","ts":"2026-12-02T07:00:10.000Z","msg":"sync done","mode":"full","took":1}
{"level":"debug","ts":"2026-12-02T07:00:32.010Z","msg":"sync applied","mode":"partial","ipvsTook":0.004}
{"level":"debug","ts":"2026-12-02T07:00:32.010Z","msg":"sync done","mode":"partial","took":0.01,"deliveredIn":0.06}
{"level":"debug","ts":"2026-12-02T07:00:40.500Z","msg":"sync applied","mode":"full","readbackTook":8}
{"level":"debug","ts":"2026-12-02T07:00:40.500Z","msg":"sync done","mode":"full","took":0.5}
{"level":"debug","ts":"2026-12-02T07:00:41.020Z","msg":"sync applied","mode":"partial","ipvsTook":0.002}
{"level":"debug","ts":"2026-12-02T07:00:41.020Z","msg":"sync done","mode":"partial","took":0.01,"deliveredIn":0.06}
`
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	b := readBreakdown(t, path)
	if len(b.reads) != 1 || len(b.synced) != 2 {
		t.Fatalf("%d reads, %d changes' syncs; want 1 and 2", len(b.reads), len(b.synced))
	}
	if want := (span{mustTime(t, "07:00:32.000"), mustTime(t, "07:00:40.000")}); b.reads[0] != want {
		t.Errorf("read %v, want %v", b.reads[0], want)
	}
	got := duringReads(b, []time.Duration{90 * time.Millisecond, 70 * time.Millisecond}, []time.Duration{60 * time.Millisecond, 60 * time.Millisecond})
	for _, want := range []string{"| during a read | 1 | 90.0 ms / 90.0 ms | 4.0 ms | 60.0 ms |", "| no read under way | 1 | 70.0 ms / 70.0 ms | 2.0 ms | 60.0 ms |"} {
		if !strings.Contains(got, want) {
			t.Errorf("no row %q in:\n%s", want, got)
		}
	}
}

func mustTime(t *testing.T, hms string) time.Time {
	t.Helper()
	ts, err := time.Parse(logTimeLayout, "2026-12-02T"+hms+"Z")
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
