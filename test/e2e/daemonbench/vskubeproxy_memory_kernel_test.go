//go:build kernel

package daemonbench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// What ipvs-proxy's memory is made of, where asked for (BENCHVS_MEMORY=1;
// the host's BENCHVS_MEMORY=DIR): the proxy runs with GODEBUG=gctrace=1
// and --profiling, its heap profile is printed to the console after the
// first complete sync and at the end (heap-first, heap-end: the live heap
// after a collection), and the report gets the collector's trace in
// figures (gcSummary) and the RSS's anonymous and file-backed parts.

// sampleFor is how long largestLiveHeap samples: more than one
// --sync-period (30 s), so that one periodic full sync's read is in it.
const sampleFor = 40 * time.Second

// memoryOn reports whether BENCHVS_MEMORY asks for it.
func memoryOn() bool { return os.Getenv("BENCHVS_MEMORY") == "1" }

// liveHeap is ours' heap profile after a forced collection.
func liveHeap(node *ktest.Node) (string, error) {
	return getOK(node, kubeproxy.MetricsAddress, "/debug/pprof/heap?gc=1")
}

// heapProfile prints ours' live heap to the console as heap-NAME.
func heapProfile(t *testing.T, node *ktest.Node, name string) {
	t.Helper()
	prof, err := liveHeap(node)
	if err != nil {
		t.Errorf("ipvs-proxy heap profile %s: %v", name, err)
		return
	}
	printProfile("heap-"+name, prof)
}

// memoryReport is the figures of BENCHVS_MEMORY for ours, read before it
// stops.
func memoryReport(t *testing.T, pid int, log string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("ipvs-proxy memory (BENCHVS_MEMORY):\n")
	fmt.Fprintf(&b, "RSS at the end: %d KiB anonymous, %d KiB file-backed; VmHWM %d KiB\n",
		status(t, pid, "RssAnon"), status(t, pid, "RssFile"), status(t, pid, "VmHWM"))
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b.WriteString(gcSummary(parseGCTrace(f)))
	return b.String()
}

// largestLiveHeap samples ours' live heap every second for d (a profile
// after a forced collection, then the heap it left, from /metrics) and
// prints the profile of the largest as heap-max: what a periodic full
// sync's read holds while the loop has not compared it yet, which the
// profiles after the first sync and at the end miss. It runs after the
// measurements: the forced collections would disturb them.
func largestLiveHeap(t *testing.T, node *ktest.Node, d time.Duration) string {
	t.Helper()
	var best string
	var bestLive float64
	var bestAt time.Duration
	start := time.Now()
	for time.Since(start) < d {
		prof, err := liveHeap(node)
		if err != nil {
			t.Errorf("ipvs-proxy heap profile: %v", err)
			return ""
		}
		metrics, err := getOK(node, kubeproxy.MetricsAddress, "/metrics")
		if err != nil {
			t.Errorf("ipvs-proxy /metrics: %v", err)
			return ""
		}
		if live, ok := metric(metrics, "go_memstats_heap_alloc_bytes"); ok && live > bestLive {
			best, bestLive, bestAt = prof, live, time.Since(start)
		}
		time.Sleep(time.Second)
	}
	if best == "" {
		return "largest live heap sampled: none\n"
	}
	printProfile("heap-max", best)
	return fmt.Sprintf("largest live heap sampled every second over %v: %.1f MB, %v in (heap-max)\n",
		d, bestLive/1e6, bestAt.Round(time.Second))
}
