package planner

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPureCore keeps the deciding core free of the kernel: the planner, the
// model and the desired-state vocabularies it plans in (ipvs, iptables)
// import no netlink, IPVS, iptables or unix package, and none of the kernel
// edges (ipvs/kernel, iptables/kernel, addrmgr), so that they build and
// `ipvs-proxy plan` runs on any GOOS. `make lint` builds them for darwin.
func TestPureCore(t *testing.T) {
	pkgs := []string{".", "../model", "../../../ipvs", "../../../iptables"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	const self = "github.com/ipvs-proxy/ipvs-proxy/"
	for _, d := range deps {
		for _, bad := range []string{"github.com/vishvananda/", "github.com/moby/ipvs", "github.com/coreos/go-iptables",
			"golang.org/x/sys/unix", self + "ipvs/kernel", self + "iptables/kernel", self + "addrmgr", self + "internal/edge/nodeenv"} {
			if d == bad || strings.HasPrefix(d, bad+"/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(d, bad)) {
				t.Errorf("the pure core (%s) depends on %s", strings.Join(pkgs, " "), d)
			}
		}
	}
}
