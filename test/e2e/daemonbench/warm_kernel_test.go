//go:build kernel

package daemonbench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// warmGolden is the plan whose sets and rules warmKernel loads: both
// families, so every set type and rule match a proxy's first sync uses.
var warmGolden = filepath.Join("..", "..", "..", "testdata", "plan", "dual-stack.golden")

// warmKernel does, before any contender starts, what the first proxy of a
// VM boot would otherwise pay for inside its first sync: the kernel loads
// the netfilter and ipset modules a rule or set needs on first use (one
// modprobe each, over 9p and under TCG), and the tools and their xtables
// extensions are read over 9p once. On a node the kubelet and the CNI
// plugins have used netfilter before any proxy starts. Without it the
// first contender of a boot measured its critical Services seconds later
// than the second. The binaries given are read once into the page cache.
func warmKernel(t *testing.T, bins ...string) {
	t.Helper()
	start := time.Now()
	for _, b := range bins {
		if _, err := os.ReadFile(b); err != nil {
			t.Fatalf("warm %s: %v", b, err)
		}
	}
	golden, err := os.ReadFile(warmGolden)
	if err != nil {
		t.Fatal(err)
	}
	text, err := planner.ParseText(golden)
	if err != nil {
		t.Fatalf("%s: %v", warmGolden, err)
	}
	node := ktest.NewNode(t)
	defer node.Close()
	node.RunInput(t, lines(text.IPSet), "ipset", "restore")
	node.RunInput(t, lines(text.IPTables), "iptables-restore")
	node.RunInput(t, lines(text.IP6Tables), "ip6tables-restore")
	t.Logf("kernel warmed (the sets and rules of %s loaded once in a scratch namespace) in %v",
		filepath.Base(warmGolden), time.Since(start).Round(time.Millisecond))
}

// lines is a section's lines as a restore reads them.
func lines(l []string) string { return strings.Join(l, "\n") + "\n" }
