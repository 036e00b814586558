package cluster_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestUpstreamNames checks the bed's names against upstream's own: every
// `It` of a docs/conformance.md row and every subtest name the re-created
// tests give t.Run must be part of the name of a [sig-network] spec of the
// real e2e.test binary (UPSTREAM_SPECS: its dry-run list, written by
// scripts/build-upstream-e2e.sh; `make conformance-names` builds both and
// runs this). A re-created test whose name drifted from upstream's, or a
// row naming a test the version does not have, fails here.
func TestUpstreamNames(t *testing.T) {
	path := os.Getenv("UPSTREAM_SPECS")
	if path == "" {
		t.Skip("UPSTREAM_SPECS unset: `make conformance-names` builds upstream's e2e.test and runs this")
	}
	specs := readLines(t, path)
	if len(specs) < 100 {
		t.Fatalf("%s: %d [sig-network] specs, want the whole list (over 100)", path, len(specs))
	}
	known := func(name string) bool {
		for _, s := range specs {
			if strings.Contains(s, name) {
				return true
			}
		}
		return false
	}
	rows := conformanceRows(t, filepath.Join("..", "..", "..", "docs", "conformance.md"))
	if len(rows) < 100 {
		t.Fatalf("docs/conformance.md: %d rows, want the checklist's 121", len(rows))
	}
	for _, r := range rows {
		switch absent := strings.HasPrefix(r.notes, notInVersion); {
		case absent && known(r.it):
			t.Errorf("docs/conformance.md %s: `%s` says %q, but %s has it", r.sn, r.it, notInVersion, path)
		case !absent && !known(r.it):
			t.Errorf("docs/conformance.md %s: `%s` is no [sig-network] spec of %s (a test of another version is noted %q)", r.sn, r.it, path, notInVersion)
		}
	}
	// The upstream run's table names whole specs of the binary.
	for _, l := range readLines(t, filepath.Join("..", "..", "..", "docs", "conformance.md")) {
		if name, ok := strings.CutPrefix(l, "| `[sig-network] "); ok {
			name = "[sig-network] " + strings.SplitN(name, "`", 2)[0]
			if !slices.ContainsFunc(specs, func(s string) bool { return strings.HasPrefix(s, name+" [") }) {
				t.Errorf("docs/conformance.md: upstream spec `%s` is no [sig-network] spec of %s", name, path)
			}
		}
	}
	subtests := subtestNames(t, ".")
	for _, s := range subtests {
		if !known(s.name) && !ownScenarios[filepath.Base(strings.Split(s.pos, ":")[0])] {
			t.Errorf("%s: t.Run(%q) is no [sig-network] spec of %s", s.pos, s.name, path)
		}
	}
	t.Logf("%d rows and %d subtest names checked against %d upstream specs", len(rows), len(subtests), len(specs))
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// notInVersion begins the notes of a row whose test the checklist names
// but the bed's upstream version does not have (a later release's).
const notInVersion = "not in v1.34.4"

// ownScenarios are the bed's files of the project's own scenarios (issue
// 17's item 4 and the mixed fleet), not re-created upstream tests.
var ownScenarios = map[string]bool{"fleet_kernel_test.go": true, "disaster_kernel_test.go": true, "upstream_kernel_test.go": true,
	"dns_kernel_test.go": true}

// row is one test of docs/conformance.md's table: its checklist number,
// upstream `It` and notes.
type row struct{ sn, it, notes string }

// rowRE matches `| SN-NN | `It` | result | time | notes |`.
var rowRE = regexp.MustCompile("^\\| (SN-[0-9]+) \\| `([^`]+)` \\|[^|]*\\|[^|]*\\| ?([^|]*)\\|$")

func conformanceRows(t *testing.T, path string) []row {
	t.Helper()
	var rows []row
	for _, l := range readLines(t, path) {
		if !strings.HasPrefix(l, "| SN-") {
			continue
		}
		m := rowRE.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("%s: a row not of the form | SN-NN | `It` | result | time | notes |: %s", path, l)
			continue
		}
		rows = append(rows, row{sn: m[1], it: m[2], notes: strings.TrimSpace(m[3])})
	}
	return rows
}

// subtest is a constant name given to t.Run in the bed's tests.
type subtest struct{ pos, name string }

// subtestNames finds every t.Run("literal", ...) in dir's kernel test
// files (the guest half, where the re-created tests are).
func subtestNames(t *testing.T, dir string) []subtest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_kernel_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no kernel test files in %s: %v", dir, err)
	}
	sort.Strings(files)
	fset := token.NewFileSet()
	var out []subtest
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Run" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, subtest{pos: fset.Position(lit.Pos()).String(), name: name})
			return true
		})
	}
	return out
}
