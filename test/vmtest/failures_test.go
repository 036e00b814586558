package vmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFailureDigest(t *testing.T) {
	dir := t.TempDir()
	src := "package x\n" + // 1
		"func TestX(t *testing.T) {\n" + // 2
		"\tt.Logf(\"progress\")\n" + // 3
		"\tt.Errorf(\"kube-proxy did not sync: %v\", err)\n" + // 4
		"\tb.t.Fatal(err)\n" + // 5
		"}\n"
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	console := strings.Join([]string{
		"=== RUN   TestX",
		"    x_test.go:3: progress",
		"    x_test.go:4: kube-proxy did not sync: timeout",
		"        a continuation line",
		"    x_test.go:5: " + strings.Repeat("y", 500),
		"    gone_test.go:9: from a file the host does not have",
		"    x_test.go:99: beyond the end of the file",
		"--- FAIL: TestX (1.00s)",
	}, "\n")
	var reports []report
	for _, l := range strings.Split(console, "\n") {
		if r, ok := parseReport(l); ok {
			reports = append(reports, r)
		}
	}
	got := failureDigest(reports, []string{t.TempDir(), dir})
	want := []string{
		"x_test.go:4: kube-proxy did not sync: timeout",
		"x_test.go:5: " + strings.Repeat("y", maxDigestLine-len("x_test.go:5: ")) + "…",
		"gone_test.go:9: from a file the host does not have",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failureDigest =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := digestSuffix(nil, nil); s != "" {
		t.Errorf("digestSuffix of no reports = %q, want empty", s)
	}
}
