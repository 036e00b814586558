package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
)

// quotedTest matches a test, benchmark or fuzz target named in a code
// span: `TestX`, `pkg.FuzzX`, `TestX/subtest`, `TestX*` (any of that
// prefix).
var quotedTest = regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z0-9_][A-Za-z0-9_]*)(\*?)`)

// declaredTest matches the declaration of a test, benchmark or fuzz target.
var declaredTest = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)

// quotedMetric matches a metric name of the proxy's two families; a
// trailing `_*` names every metric of that prefix.
var quotedMetric = regexp.MustCompile(`\b((?:ipvs_proxy|kubeproxy)_[a-z0-9_]*[a-z0-9])(_\*)?`)

// quotedNames returns, for each name re matches inside a code span of the
// pages, where it is quoted first ("path:line").
func quotedNames(pages []page, re *regexp.Regexp) map[string]string {
	where := map[string]string{}
	for _, p := range pages {
		for _, l := range p.lines {
			for _, span := range codeSpan.FindAllString(l.text, -1) {
				for _, m := range re.FindAllStringSubmatch(span, -1) {
					name := m[1] + m[2]
					if _, ok := where[name]; !ok {
						where[name] = p.path + ":" + strconv.Itoa(l.n)
					}
				}
			}
		}
	}
	return where
}

// declaredTests returns every test, benchmark and fuzz target declared in a
// _test.go file of the repository, the nested modules included.
func declaredTests(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declaredTest.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no tests found under %s", root)
	}
	return names
}

// TestDocsNameExistingTests requires every test, benchmark and fuzz target
// README.md and docs/*.md quote to be declared somewhere in the repository.
func TestDocsNameExistingTests(t *testing.T) {
	declared := declaredTests(t)
	quoted := quotedNames(readPages(t), quotedTest)
	for name, where := range quoted {
		prefix, isPrefix := strings.CutSuffix(name, "*")
		found := declared[name]
		if isPrefix {
			for d := range declared {
				if strings.HasPrefix(d, prefix) {
					found = true
					break
				}
			}
		}
		if !found {
			t.Errorf("%s: `%s` is no test, benchmark or fuzz target of the repository", where, name)
		}
	}
}

// descName matches a metric's name in a prometheus.Desc's String.
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// exportedMetrics returns the names of every metric internal/metrics
// registers: the collectors held in its exported fields, described, and
// whatever its registry gathers (series registered there alone, as the
// build info). A histogram's series suffixes are included.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	names := map[string]bool{}
	add := func(name string) {
		for _, s := range []string{"", "_bucket", "_sum", "_count"} {
			names[name+s] = true
		}
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		add(f.GetName())
	}
	collector := reflect.TypeFor[prometheus.Collector]()
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		if v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return
			}
		}
		if v.Type().Implements(collector) {
			ch := make(chan *prometheus.Desc, 16)
			go func() {
				v.Interface().(prometheus.Collector).Describe(ch)
				close(ch)
			}()
			for d := range ch {
				if n := descName.FindStringSubmatch(d.String()); n != nil {
					add(n[1])
				}
			}
			return
		}
		if v.Kind() == reflect.Pointer {
			walk(v.Elem())
			return
		}
		if v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		}
	}
	walk(reflect.ValueOf(m))
	// The per-Service statistics, registered by run with --service-stats.
	walk(reflect.ValueOf(metrics.NewServiceStats(1, true, nil)))
	return names
}

// TestDocsNameExportedMetrics requires every ipvs_proxy_* and kubeproxy_*
// metric README.md and docs/*.md quote to be one the proxy exports (or,
// quoted as `prefix_*`, the prefix of one), except where a line says the
// proxy does not export it.
func TestDocsNameExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	if !exported["ipvs_proxy_syncs_total"] || !exported["kubeproxy_sync_proxy_rules_duration_seconds"] {
		t.Fatalf("internal/metrics: the known series are missing from %d names found", len(exported))
	}
	pages := readPages(t)
	for name, where := range quotedNames(pages, quotedMetric) {
		prefix, isPrefix := strings.CutSuffix(name, "_*")
		found := exported[name]
		if isPrefix {
			for e := range exported {
				if strings.HasPrefix(e, prefix+"_") {
					found = true
					break
				}
			}
		}
		if !found && !saidNotExported(pages, name) {
			t.Errorf("%s: `%s` is no metric the proxy exports (internal/metrics)", where, name)
		}
	}
}

// saidNotExported reports whether a line quoting name says it is not
// exported or not kept: a kube-proxy series the proxy leaves out.
func saidNotExported(pages []page, name string) bool {
	for _, p := range pages {
		for _, l := range p.lines {
			lower := strings.ToLower(l.text)
			if strings.Contains(l.text, "`"+name+"`") &&
				slices.ContainsFunc([]string{"not exported", "does not export", "not kept"}, func(s string) bool { return strings.Contains(lower, s) }) {
				return true
			}
		}
	}
	return false
}
