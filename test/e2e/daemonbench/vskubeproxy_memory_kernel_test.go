//go:build kernel

package daemonbench

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// What ipvs-proxy's memory is made of, where asked for (BENCHVS_MEMORY=1;
// the host's BENCHVS_MEMORY=DIR): the proxy runs with GODEBUG=gctrace=1
// and --profiling, its heap profile is printed to the console after the
// first complete sync and at the end (heap-first, heap-end: the live heap
// after a collection), and the report gets the collector's trace in
// figures (gcSummary) and the RSS's anonymous and file-backed parts.

// memoryOn reports whether BENCHVS_MEMORY asks for it.
func memoryOn() bool { return os.Getenv("BENCHVS_MEMORY") == "1" }

// heapProfile prints ours' live heap to the console as heap-NAME.
func heapProfile(t *testing.T, node *ktest.Node, name string) {
	t.Helper()
	prof, err := getOK(node, kubeproxy.MetricsAddress, "/debug/pprof/heap?gc=1")
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
