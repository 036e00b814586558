package docscheck

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const readme = "../../README.md"

// layoutOutside are the trees README's Layout table need not list package
// by package: the test bed, the tools and the deploy manifests.
var layoutOutside = []string{"test/", "tools/", "deploy/"}

// layoutCell matches one backquoted path in the first cell of a Layout row.
var layoutCell = regexp.MustCompile("`([^`]+)`")

// parseLayout returns the paths the first column of README's "## Layout"
// table names, each without a trailing slash, in table order.
func parseLayout(doc string) []string {
	var paths []string
	inLayout := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "## ") {
			inLayout = strings.TrimSpace(line) == "## Layout"
			continue
		}
		if !inLayout || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range layoutCell.FindAllStringSubmatch(cells[1], -1) {
			paths = append(paths, strings.TrimSuffix(m[1], "/"))
		}
	}
	return paths
}

// goPackages returns the directories, relative to the module root, of the
// packages `go list ./...` finds outside layoutOutside.
func goPackages(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Module.Path}}", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, mod, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("go list: unexpected line %q", line)
		}
		dir := strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/")
		if !outsideLayout(dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

func outsideLayout(dir string) bool {
	for _, p := range layoutOutside {
		if dir+"/" == p || strings.HasPrefix(dir, p) {
			return true
		}
	}
	return false
}

func TestParseLayout(t *testing.T) {
	doc := "## Layout\n\n| Path | Owns |\n| --- | --- |\n" +
		"| `informers/` | Watches `Services`. |\n" +
		"| `test/vmtest`, `test/ktest` | The bed. |\n" +
		"## Next\n| `not/layout` | x |\n"
	got := parseLayout(doc)
	want := []string{"informers", "test/vmtest", "test/ktest"}
	if !slices.Equal(got, want) {
		t.Errorf("parseLayout:\n got %v\nwant %v", got, want)
	}
}

// TestReadmeLayoutMatchesGoList requires README's Layout table to name every
// Go package outside test/, tools/ and deploy/ exactly once, and to name no
// package there that `go list ./...` does not find.
func TestReadmeLayoutMatchesGoList(t *testing.T) {
	raw, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]int{}
	for _, p := range parseLayout(string(raw)) {
		if !outsideLayout(p) {
			listed[p]++
		}
	}
	if len(listed) == 0 {
		t.Fatalf("%s: no Layout table found", readme)
	}
	for _, dir := range goPackages(t) {
		switch n := listed[dir]; {
		case n == 0:
			t.Errorf("package %s is missing from the Layout table of %s; add a row: | `%s` | what it owns |", dir, readme, dir)
		case n > 1:
			t.Errorf("package %s is listed %d times in the Layout table of %s", dir, n, readme)
		}
		delete(listed, dir)
	}
	for p := range listed {
		t.Errorf("the Layout table of %s names %s, which `go list ./...` does not find", readme, p)
	}
}
