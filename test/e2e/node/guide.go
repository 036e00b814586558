package node

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// A guide's tested commands are ```sh blocks, each right after a marker
// line `<!-- test: NAME -->`; a block the test leaves out on purpose has
// `<!-- not tested: WHY -->` instead. In a section (a heading and what
// follows it down to the next heading) that holds a tested block, every
// other sh block that runs kubectl must carry one of the two markers, so
// a command added to the tested steps cannot escape the test unnoticed.
var (
	testMarker    = regexp.MustCompile(`^<!-- test: ([a-z0-9/-]+) -->$`)
	untestedMark  = regexp.MustCompile(`^<!-- not tested: .+ -->$`)
	kubectlOnLine = regexp.MustCompile(`(^|[|;&(]\s*)kubectl\s`)
)

// EnvKubectl is the kubectl binary the guest runs the guide's blocks with
// (make kubectl's, v1.34.4), set by TestMigrationDoc.
const EnvKubectl = "NODE_KUBECTL_BIN"

// ErrGuide is wrapped by every error about a guide's markers and blocks.
var ErrGuide = errors.New("migration guide")

// Block is one marked block of a guide.
type Block struct {
	Name    string // the marker's NAME
	Section string // the heading above it
	Line    int    // the line of its first command, 1-based
	Script  string // its lines, as the reader sees them
}

// shBlock is a fenced sh block while parsing: its marker, if any.
type shBlock struct {
	Block
	marker   string // "test", "not tested" or ""
	kubectl  bool   // a line runs kubectl
	markLine int
}

// ParseGuide returns the marked blocks of a guide in the order they
// appear. It fails on a marker that is not followed by a ```sh fence, a
// name used twice, an unclosed fence, and an unmarked sh block that runs
// kubectl in a section with a marked one.
func ParseGuide(text string) ([]Block, error) {
	lines := strings.Split(text, "\n")
	var (
		blocks  []shBlock
		section string
		pending string // the marker seen on the line before
		pendLn  int
	)
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], " \t")
		if pending != "" && line != "```sh" {
			return nil, fmt.Errorf("%w: line %d: marker %q is not followed by a ```sh fence", ErrGuide, pendLn, pending)
		}
		switch {
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		case testMarker.MatchString(line) || untestedMark.MatchString(line):
			pending, pendLn = line, i+1
		case strings.HasPrefix(line, "```"):
			b := shBlock{Block: Block{Section: section, Line: i + 2}, markLine: pendLn}
			if m := testMarker.FindStringSubmatch(pending); m != nil {
				b.Name, b.marker = m[1], "test"
			} else if pending != "" {
				b.marker = "not tested"
			}
			pending = ""
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, lines[i])
				cmd, _, _ := strings.Cut(strings.TrimSpace(lines[i]), "#")
				b.kubectl = b.kubectl || kubectlOnLine.MatchString(cmd)
			}
			if i == len(lines) {
				return nil, fmt.Errorf("%w: line %d: the fence is not closed", ErrGuide, b.Line-1)
			}
			if line != "```sh" {
				continue
			}
			b.Script = strings.Join(body, "\n") + "\n"
			blocks = append(blocks, b)
		}
	}
	tested := map[string]bool{}
	seen := map[string]int{}
	for _, b := range blocks {
		if b.marker == "test" {
			tested[b.Section] = true
			if ln, dup := seen[b.Name]; dup {
				return nil, fmt.Errorf("%w: line %d: block %q is marked twice (first at line %d)", ErrGuide, b.markLine, b.Name, ln)
			}
			seen[b.Name] = b.markLine
		}
	}
	var out []Block
	for _, b := range blocks {
		switch {
		case b.marker == "test":
			out = append(out, b.Block)
		case b.marker == "" && b.kubectl && tested[b.Section]:
			return nil, fmt.Errorf("%w: line %d: a kubectl block in %q, whose steps are tested, has no marker (<!-- test: NAME --> or <!-- not tested: WHY -->)",
				ErrGuide, b.Line-1, b.Section)
		}
	}
	return out, nil
}

// Proxy is the DaemonSet that serves the node after a step.
type Proxy string

const (
	KubeProxy Proxy = "kube-proxy"
	IPVSProxy Proxy = "ipvs-proxy"
)

// GuideStep is one marked block the test runs and the proxy that must
// serve the node once it has run.
type GuideStep struct {
	Block  string
	Serves Proxy
}

// MigrationGuide is the walk through docs/migration.md that make
// test-migration-doc runs on node-a under traffic: the copy for the way
// back, the replacement at once, the way back after kube-proxy's
// DaemonSet was deleted (its node by node step is the one-node rollback's
// block), then the migration node by node to the end.
var MigrationGuide = []GuideStep{
	{"before", KubeProxy},
	{"replace", IPVSProxy},
	{"rollback/kube-proxy-back", IPVSProxy},
	{"rollback/one-node", KubeProxy},
	{"rollback/finish", KubeProxy},
	{"node-by-node/affinity", KubeProxy},
	{"node-by-node/install", KubeProxy},
	{"node-by-node/move", IPVSProxy},
	{"node-by-node/finish", IPVSProxy},
}

// GuideScript is the blocks of steps, in the steps' order. Every step's
// block must be among blocks and every block must be run by a step.
func GuideScript(blocks []Block, steps []GuideStep) ([]Block, error) {
	byName := map[string]Block{}
	for _, b := range blocks {
		byName[b.Name] = b
	}
	used := map[string]bool{}
	var out []Block
	var errs []error
	for _, s := range steps {
		b, ok := byName[s.Block]
		if !ok {
			errs = append(errs, fmt.Errorf("%w: no block marked <!-- test: %s -->", ErrGuide, s.Block))
			continue
		}
		used[s.Block] = true
		out = append(out, b)
	}
	for _, b := range blocks {
		if !used[b.Name] {
			errs = append(errs, fmt.Errorf("%w: line %d: block %q is marked, but the test runs no such step", ErrGuide, b.Line-1, b.Name))
		}
	}
	return out, errors.Join(errs...)
}
