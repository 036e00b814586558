package guard

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoKernelImports: the guard is pure. Nothing it imports, directly or
// not, talks to the kernel (`go list -deps`).
func TestNoKernelImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		for _, bad := range []string{"github.com/vishvananda/", "github.com/moby/ipvs", "github.com/coreos/go-iptables",
			"golang.org/x/sys/unix", "github.com/ipvs-proxy/ipvs-proxy/addrmgr", "github.com/ipvs-proxy/ipvs-proxy/ipvs",
			"github.com/ipvs-proxy/ipvs-proxy/iptables", "k8s.io/client-go"} {
			if d == bad || strings.HasPrefix(d, bad+"/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(d, bad)) {
				t.Errorf("internal/decide/guard depends on %s", d)
			}
		}
	}
}
