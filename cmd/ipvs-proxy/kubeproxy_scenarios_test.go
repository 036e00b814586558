package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/mdanchor"
)

// scenarioDir holds kube-proxy 1.34's own IPVS proxier test scenarios
// (pkg/proxy/ipvs/proxier_test.go) as inputs to plan, each with the
// upstream test's expectations written in plan's output form.
var scenarioDir = filepath.Join("..", "..", "testdata", "kube-proxy-1.34", "ipvs-proxier")

// scenario is one scenario file's leading comment block:
//
//	# upstream: TEST "CASE" (proxier_test.go:LINE)   the test it mirrors (required)
//	# flags: ARGS                                    plan's flags (required, once)
//	# want: LINE        a line plan must print (an upstream expectation)
//	# not: LINE         a line plan must not print (upstream asserts it absent)
//	# exact: ipvs       the # ipvs section is exactly the want lines of it
//	#                   (upstream compares the whole IPVS table)
//	# deviation: DOC#ANCHOR: WHY
//	#                   an upstream expectation this project deliberately
//	#                   does differently; not checked, but DOC#ANCHOR must
//	#                   exist and say so
type scenario struct {
	upstream   string
	args       []string
	want, not  []string
	exactIPVS  bool
	deviations []deviation
}

type deviation struct{ doc, anchor, why string }

var (
	scenarioLine  = regexp.MustCompile(`^# (upstream|flags|want|not|exact|deviation): (.*)$`)
	deviationLine = regexp.MustCompile(`^(docs/[a-z-]+\.md)#([a-z0-9-]+): (.+)$`)
)

func readScenario(path string) (scenario, error) {
	var s scenario
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	flags := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break
		}
		m := scenarioLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch v := m[2]; m[1] {
		case "upstream":
			s.upstream = v
		case "flags":
			flags++
			s.args = strings.Fields(v)
		case "want":
			s.want = append(s.want, v)
		case "not":
			s.not = append(s.not, v)
		case "exact":
			if v != "ipvs" {
				return s, fmt.Errorf("%s: exact: %q, only ipvs is known", path, v)
			}
			s.exactIPVS = true
		case "deviation":
			d := deviationLine.FindStringSubmatch(v)
			if d == nil {
				return s, fmt.Errorf("%s: deviation %q names no docs/PAGE.md#anchor", path, v)
			}
			s.deviations = append(s.deviations, deviation{doc: d[1], anchor: d[2], why: d[3]})
		}
	}
	switch {
	case s.upstream == "":
		return s, fmt.Errorf("%s: no '# upstream:' line naming the kube-proxy test", path)
	case flags != 1:
		return s, fmt.Errorf("%s: %d '# flags:' lines, want 1", path, flags)
	case len(s.want)+len(s.not) == 0:
		return s, fmt.Errorf("%s: no '# want:' or '# not:' line", path)
	}
	return s, sc.Err()
}

// planSections splits plan's text output into lines per section header.
func planSections(out string) map[string][]string {
	sec := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "# ") {
			cur = strings.TrimPrefix(l, "# ")
			continue
		}
		if l != "" {
			sec[cur] = append(sec[cur], l)
		}
	}
	return sec
}

// docAnchors are the GitHub anchors of a Markdown page's headings.
func docAnchors(t *testing.T, page string) []string {
	t.Helper()
	a, err := mdanchor.File(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestKubeProxyIPVSScenarios plans every scenario of scenarioDir and checks
// the upstream expectations written in it: each want line printed, each not
// line absent, and each deviation pointing at a documented difference.
func TestKubeProxyIPVSScenarios(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(scenarioDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenarios in %s: %v", scenarioDir, err)
	}
	anchors := map[string][]string{}
	var checked, deviations int
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		s, err := readScenario(path)
		if err != nil {
			t.Fatal(err)
		}
		checked += len(s.want) + len(s.not)
		deviations += len(s.deviations)
		t.Run(name, func(t *testing.T) {
			args := append([]string{"plan", "-f", path}, s.args...)
			var stdout, stderr bytes.Buffer
			if code := Main(args, strings.NewReader(""), &stdout, &stderr); code != exitOK {
				t.Fatalf("%s: exit %d: %s", s.upstream, code, stderr.String())
			}
			out := stdout.String()
			sections := planSections(out)
			lines := strings.Split(out, "\n") // section headers included
			for _, w := range s.want {
				if !slices.Contains(lines, w) {
					t.Errorf("%s: want %q, not in plan", s.upstream, w)
				}
			}
			for _, n := range s.not {
				if slices.Contains(lines, n) {
					t.Errorf("%s: not %q, but plan has it", s.upstream, n)
				}
			}
			if s.exactIPVS {
				var want []string
				for _, w := range s.want {
					if strings.HasPrefix(w, "-A ") || strings.HasPrefix(w, "-a ") {
						want = append(want, w)
					}
				}
				for _, l := range sections["ipvs"] {
					if !slices.Contains(want, l) {
						t.Errorf("%s: the IPVS table must be exactly the want lines; plan also has %q", s.upstream, l)
					}
				}
			}
			for _, d := range s.deviations {
				if _, ok := anchors[d.doc]; !ok {
					anchors[d.doc] = docAnchors(t, d.doc)
				}
				if !slices.Contains(anchors[d.doc], d.anchor) {
					t.Errorf("deviation %q: %s has no section #%s", d.why, d.doc, d.anchor)
				}
			}
			if t.Failed() {
				t.Logf("plan %s:\n%s", strings.Join(args[1:], " "), out)
			}
		})
	}
	t.Logf("%d scenarios, %d expectations checked, %d deviations", len(paths), checked, deviations)

	// docs/rules.md states the counts; they must be these.
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "rules.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(raw)), " ")
	for _, want := range []string{
		fmt.Sprintf("as %d scenarios", len(paths)),
		fmt.Sprintf("**%d expectations checked, %d agreeing**", checked, checked),
		fmt.Sprintf("%d upstream expectations are deliberate differences", deviations),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/rules.md, Agreement with kube-proxy's own IPVS tests: does not say %q", want)
		}
	}
}
