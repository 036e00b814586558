package vmtest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// A guest test's failure messages are printed where they happen, and the
// cleanups that follow (process logs of 60 lines each) can push them out of
// the tail a CI system keeps. The host therefore repeats them in the run's
// error: every "    name_test.go:N: message" line the guest printed whose
// source line N calls Error, Errorf, Fatal or Fatalf, first lines only.

// reportLine is one "    name_test.go:N: ..." line of go test -v output.
var reportLine = regexp.MustCompile(`^\s+(\w+_test\.go):(\d+): (.*)$`)

// failCall matches a source line that reports a failure.
var failCall = regexp.MustCompile(`\.(Error|Errorf|Fatal|Fatalf)\(`)

// maxReports bounds what the console scan keeps; maxDigest what the error repeats.
const (
	maxReports    = 20000
	maxDigest     = 15
	maxDigestLine = 400
)

// report is a candidate failure line seen on the console.
type report struct {
	file string
	line int
	text string
}

// parseReport returns the report on one console line, if it is one.
func parseReport(line string) (report, bool) {
	m := reportLine.FindStringSubmatch(line)
	if m == nil {
		return report{}, false
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		return report{}, false
	}
	return report{file: m[1], line: n, text: m[3]}, true
}

// failureDigest keeps the reports whose source line, looked up in the jobs'
// package directories, calls a failing method; a report whose file is not
// found is kept (better one line too many than the cause missing). At most
// maxDigest lines, the first ones, each cut to maxDigestLine bytes.
func failureDigest(reports []report, dirs []string) []string {
	sources := map[string][]string{}
	lines := func(file string) []string {
		if l, ok := sources[file]; ok {
			return l
		}
		var l []string
		for _, d := range dirs {
			if f, err := os.Open(filepath.Join(d, file)); err == nil {
				sc := bufio.NewScanner(f)
				sc.Buffer(make([]byte, 64*1024), 1024*1024)
				for sc.Scan() {
					l = append(l, sc.Text())
				}
				f.Close()
				break
			}
		}
		sources[file] = l
		return l
	}
	var out []string
	for _, r := range reports {
		src := lines(r.file)
		if src != nil && (r.line > len(src) || !failCall.MatchString(src[r.line-1])) {
			continue
		}
		text := r.file + ":" + strconv.Itoa(r.line) + ": " + r.text
		if len(text) > maxDigestLine {
			text = text[:maxDigestLine] + "…"
		}
		out = append(out, text)
		if len(out) == maxDigest {
			break
		}
	}
	return out
}

// digestSuffix is the text the run's error ends with: the digest, one
// report per line, or "" when there is none.
func digestSuffix(reports []report, jobs []Job) string {
	var dirs []string
	for _, j := range jobs {
		dirs = append(dirs, j.Dir)
	}
	d := failureDigest(reports, dirs)
	if len(d) == 0 {
		return ""
	}
	return "\nthe guest reported (first failures, repeated here because later output may hide them):\n\t" + strings.Join(d, "\n\t")
}
