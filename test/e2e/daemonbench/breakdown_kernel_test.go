//go:build kernel

package daemonbench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadBreakdown reads a log of ipvs-proxy's debug lines as the
// harness does: the partial syncs that applied a triggered change, and the
// full syncs after the first, each split into its stages. It needs no
// kernel: go test -tags kernel -run TestReadBreakdown ./daemonbench
func TestReadBreakdown(t *testing.T) {
	log := strings.Join([]string{
		`{"level":"debug","msg":"sync applied","mode":"full","ipvsTook":9}`,
		`{"level":"debug","msg":"sync done","mode":"full","took":10}`,
		`{"level":"info","msg":"first full sync applied"}`,
		`{"level":"debug","msg":"sync applied","mode":"partial","ipvsTook":0.002}`,
		`{"level":"debug","msg":"sync done","mode":"partial","took":0.01,"deliveredIn":0.05}`,
		`{"level":"debug","msg":"sync applied","mode":"full","ipvsTook":1.5,"rulesTook":0.5,"readbackTook":4,"readIPVSTook":3}`,
		`{"level":"debug","msg":"sync done","mode":"full","took":2.5,"planTook":0.002}`,
		// A partial sync of no triggered change (a kick) is not counted.
		`{"level":"debug","msg":"sync applied","mode":"partial","ipvsTook":0.001}`,
		`{"level":"debug","msg":"sync done","mode":"partial","took":0.004}`,
		`{"level":"debug","msg":"sync applied","mode":"partial","ipvsTook":0.003}`,
		`{"level":"debug","msg":"sync done","mode":"partial","took":0.02,"deliveredIn":0.06}`,
	}, "\n")
	path := filepath.Join(t.TempDir(), "ipvs-proxy.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	b := readBreakdown(t, path)
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	if len(b.took) != 2 || b.took[0] != ms(10) || b.took[1] != ms(20) {
		t.Errorf("partial syncs took %v, want [10ms 20ms]", b.took)
	}
	ipvs := b.per[8] // stages: the IPVS step
	if len(ipvs) != 2 || ipvs[0] != ms(2) || ipvs[1] != ms(3) {
		t.Errorf("partial IPVS steps %v, want [2ms 3ms]", ipvs)
	}
	if len(b.full[0]) != 1 || b.full[0][0] != 2500*time.Millisecond {
		t.Errorf("full syncs after the first took %v, want [2.5s]", b.full[0])
	}
	if got := b.full[2]; len(got) != 1 || got[0] != ms(2) {
		t.Errorf("full sync planning %v, want [2ms]", got)
	}
	if got := b.full[5]; len(got) != 1 || got[0] != 4*time.Second {
		t.Errorf("full sync IPVS read beside the loop %v, want [4s]", got)
	}
	if got := b.full[6]; len(got) != 1 || got[0] != 3*time.Second {
		t.Errorf("full sync IPVS read %v, want [3s]", got)
	}
	if got := b.full[10]; len(got) != 1 || got[0] != 1500*time.Millisecond {
		t.Errorf("full sync IPVS step %v, want [1.5s]", got)
	}
}
