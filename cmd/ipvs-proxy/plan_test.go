package main

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/plan")

// planDir holds the golden cases, shared with other tests of the repository.
var planDir = filepath.Join("..", "..", "testdata", "plan")

// variant is one run of `ipvs-proxy plan` over a case file, declared in the
// file's leading comments:
//
//	# flags: ARGS          -> CASE.golden, stdout of a successful plan
//	# flags[NAME]: ARGS    -> CASE.NAME.golden
//	# error[NAME]: ARGS    -> CASE.NAME.golden, stderr of a plan that must exit 2
//
// A "-f FILE" or "--node-cache FILE" in ARGS names another file under
// testdata/plan.
type variant struct {
	name   string
	args   []string
	failed bool
}

var variantLine = regexp.MustCompile(`^# (flags|error)(?:\[([a-z0-9-]+)\])?:(.*)$`)

func readVariants(t *testing.T, path string) []variant {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []variant
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break
		}
		m := variantLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		args := strings.Fields(m[3])
		for i := 0; i+1 < len(args); i++ {
			if (args[i] == "-f" || args[i] == "--node-cache") && args[i+1] != "-" {
				args[i+1] = filepath.Join(planDir, args[i+1])
			}
		}
		out = append(out, variant{name: m[2], args: args, failed: m[1] == "error"})
	}
	if len(out) == 0 {
		t.Fatalf("%s declares no '# flags:' line", path)
	}
	return out
}

func TestPlanGolden(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join(planDir, "*.yaml"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no cases in %s: %v", planDir, err)
	}
	for _, path := range cases {
		base := strings.TrimSuffix(filepath.Base(path), ".yaml")
		for _, v := range readVariants(t, path) {
			name, golden := base, filepath.Join(planDir, base+".golden")
			if v.name != "" {
				name += "." + v.name
				golden = filepath.Join(planDir, base+"."+v.name+".golden")
			}
			t.Run(name, func(t *testing.T) {
				args := append([]string{"plan", "-f", path}, v.args...)
				var stdout, stderr bytes.Buffer
				code := Main(args, strings.NewReader(""), &stdout, &stderr)
				got := stdout.Bytes()
				switch {
				case v.failed && code != exitUsage:
					t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
				case v.failed:
					got = stderr.Bytes()
				case code != exitOK || stderr.Len() > 0:
					t.Fatalf("exit %d; stderr: %s", code, stderr.String())
				}
				if *update {
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./cmd/ipvs-proxy -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("plan %s differs from %s (go test ./cmd/ipvs-proxy -update rewrites it):\n%s",
						strings.Join(args, " "), golden, lineDiff(string(want), string(got)))
				}
				if v.failed {
					return
				}

				// The same documents in reverse order, through stdin, must
				// plan byte for byte the same.
				in, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				docs := strings.Split(string(in), "\n---\n")
				slices.Reverse(docs)
				args[2] = "-"
				var again bytes.Buffer
				if code := Main(args, strings.NewReader(strings.Join(docs, "\n---\n")), &again, &stderr); code != exitOK {
					t.Fatalf("reversed input: exit %d: %s", code, stderr.String())
				}
				if !bytes.Equal(again.Bytes(), got) {
					t.Errorf("reversed input plans differently:\n%s", lineDiff(string(got), again.String()))
				}
			})
		}
	}
}

// lineDiff shows the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	if b.Len() == 0 {
		return "(same lines, different order)"
	}
	return b.String()
}

// TestPlanWarns: plan still prints the plan, and says on stderr what makes
// it doubtful: a --node-name no Node of the input has, and fields a kind
// does not have (a misspelt field plans as if it were not there).
func TestPlanWarns(t *testing.T) {
	in := `apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.20
  ports: [{port: 80, protocol: TCP}]
  externalTrafficPolicy: Local
  sessionAffinty: ClientIP
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
  status:
    adresses: [{type: InternalIP, address: 10.10.0.1}]
`
	var stdout, stderr bytes.Buffer
	code := Main([]string{"plan", "-f", "-", "--node-name", "n2", "--node-ip", "10.10.0.2"}, strings.NewReader(in), &stdout, &stderr)
	if code != exitOK || !strings.Contains(stdout.String(), "-A -t 10.96.0.20:80") {
		t.Fatalf("exit %d, stdout %q: want the plan all the same; stderr %s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		`<stdin>: document 0: Service shop/web: strict decoding error: unknown field "spec.sessionAffinty"`,
		`<stdin>: document 1, item 0: Node n1: strict decoding error: unknown field "status.adresses"`,
		"--node-name n2 is not among the 1 Node(s) given",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}
