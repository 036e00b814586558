package docscheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ipvs-proxy/ipvs-proxy/"

// kernelEdges are the packages that talk to the kernel, each with what of
// the project it may import besides the shared leaves: its own layer's
// package (for its types and interfaces), nothing that decides.
var kernelEdges = map[string][]string{
	"ipvs/kernel":           {"ipvs"},
	"iptables/kernel":       {"iptables"},
	"addrmgr/kernel":        {"addrmgr"},
	"internal/edge/nlconn":  nil,
	"internal/edge/nodeenv": nil,
}

// sharedLeaves may be imported by any package: the model, and helpers that
// import nothing of the project's.
var sharedLeaves = []string{"internal/decide/model", "internal/layer", "internal/digest", "internal/edge/nlconn"}

// deciding are the packages that decide: they import no kernel edge, so
// that they build and test anywhere (`plan` on a laptop).
var deciding = []string{"internal/decide/convert", "internal/decide/model", "internal/decide/guard", "internal/decide/planner", "internal/decide/nodeplan", "internal/decide/explain", "ipvs", "iptables", "addrmgr"}

// goImports maps each package of the main module (relative to it) to the
// project's packages it imports, relative too; tests says whether the test
// files' imports count.
func goImports(t *testing.T, tests bool) map[string][]string {
	t.Helper()
	format := `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`
	if tests {
		format = `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}`
	}
	cmd := exec.Command("go", "list", "-tags", "kernel", "-f", format, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok {
			continue
		}
		var deps []string
		for _, d := range f[1:] {
			if d, ok := strings.CutPrefix(d, module); ok && d != pkg {
				deps = append(deps, d)
			}
		}
		m[pkg] = deps
	}
	return m
}

// TestImportsRunDownTheFlow: kernel edges import nothing that decides,
// deciding packages import no kernel edge, nothing imports a command, and
// no production package imports a fake (the *test packages).
func TestImportsRunDownTheFlow(t *testing.T) {
	prod := goImports(t, false)
	for edge, own := range kernelEdges {
		if _, ok := prod[edge]; !ok {
			t.Errorf("kernel edge %s is not a package of the module", edge)
		}
		for _, d := range prod[edge] {
			if !slices.Contains(sharedLeaves, d) && !slices.Contains(own, d) {
				t.Errorf("kernel edge %s imports %s: a kernel package imports only its own layer and the shared leaves %v", edge, d, sharedLeaves)
			}
		}
	}
	for _, p := range deciding {
		for _, d := range prod[p] {
			if _, edge := kernelEdges[d]; edge {
				t.Errorf("%s decides and imports the kernel edge %s", p, d)
			}
		}
	}
	for p, deps := range prod {
		for _, d := range deps {
			if strings.HasPrefix(d, "cmd/") {
				t.Errorf("%s imports the command %s", p, d)
			}
			if strings.HasSuffix(d, "test") && !strings.HasPrefix(p, "test/") && !strings.HasSuffix(p, "test") {
				t.Errorf("production package %s imports the fake %s; fakes are for tests", p, d)
			}
		}
	}
	// The fakes stand in for a layer without its kernel edge.
	all := goImports(t, true)
	for _, fake := range []string{"ipvs/ipvstest", "iptables/iptablestest", "addrmgr/addrmgrtest"} {
		for _, d := range all[fake] {
			if _, edge := kernelEdges[d]; edge {
				t.Errorf("fake %s imports the kernel edge %s", fake, d)
			}
		}
	}
}
