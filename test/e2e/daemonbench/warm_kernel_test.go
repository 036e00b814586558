//go:build kernel

package daemonbench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	sections := planSections(string(golden))
	node := ktest.NewNode(t)
	defer node.Close()
	node.RunInput(t, sections["ipset"], "ipset", "restore")
	node.RunInput(t, sections["iptables"], "iptables-restore")
	node.RunInput(t, sections["ip6tables"], "ip6tables-restore")
	t.Logf("kernel warmed (the sets and rules of %s loaded once in a scratch namespace) in %v",
		filepath.Base(warmGolden), time.Since(start).Round(time.Millisecond))
}

// planSections splits `ipvs-proxy plan` text at its "# NAME" headers.
func planSections(text string) map[string]string {
	out := map[string]string{}
	name := ""
	var b strings.Builder
	flush := func() {
		if name != "" {
			out[name] = b.String()
		}
		b.Reset()
	}
	for _, l := range strings.SplitAfter(text, "\n") {
		if h, ok := strings.CutPrefix(l, "# "); ok && !strings.Contains(h, " ") {
			flush()
			name = strings.TrimSpace(h)
			continue
		}
		b.WriteString(l)
	}
	flush()
	return out
}
