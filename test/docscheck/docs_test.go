package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// flagsDoc is the document every `run` flag must appear in.
const flagsDoc = "../../docs/flags.md"

// flag is one flag as `--help` prints it or as docs/flags.md lists it.
type flag struct {
	Name    string // without the leading "--"
	Type    string // pflag's type word ("string", "duration", "strings"); "" for a bool
	Default string // pflag's "(default ...)" text without quotes; "" when it prints none
}

func (f flag) String() string {
	return fmt.Sprintf("--%s type=%q default=%q", f.Name, f.Type, f.Default)
}

// buildBinary returns IPVS_PROXY_BIN (`make test-unit` builds bin/ipvs-proxy
// first and sets it, so the tests do not compile the binary a second time
// while the race-detector builds compete for the same cores), or builds
// cmd/ipvs-proxy the way the Makefile does (static, trimmed) into a
// temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("IPVS_PROXY_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("IPVS_PROXY_BIN: %v", err)
		}
		return bin
	}
	bin := filepath.Join(t.TempDir(), "ipvs-proxy")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/ipvs-proxy/ipvs-proxy/cmd/ipvs-proxy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ipvs-proxy: %v\n%s", err, out)
	}
	return bin
}

// helpLine matches pflag's usage lines: "  -h, --help   help for run",
// "      --config string   Configuration file ...".
var helpLine = regexp.MustCompile(`^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)(?: ([a-zA-Z0-9]+))?\s{2,}(.*)$`)

// helpDefault matches the "(default ...)" pflag appends to a usage text.
var helpDefault = regexp.MustCompile(`\(default (.*)\)\s*$`)

// parseHelp returns the flags of a cobra `--help` text, local and global,
// except --help itself.
func parseHelp(help string) ([]flag, error) {
	var flags []flag
	sc := bufio.NewScanner(strings.NewReader(help))
	inFlags := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, "Flags:") { // "Flags:" and "Global Flags:"
			inFlags = true
			continue
		}
		if !strings.HasPrefix(line, " ") {
			inFlags = false
			continue
		}
		if !inFlags {
			continue
		}
		m := helpLine.FindStringSubmatch(line)
		if m == nil {
			continue // a usage text wrapped onto its own line
		}
		f := flag{Name: m[1], Type: m[2]}
		if d := helpDefault.FindStringSubmatch(m[3]); d != nil {
			f.Default = strings.Trim(d[1], `"`)
		}
		if f.Name != "help" {
			flags = append(flags, f)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("no flags found in:\n%s", help)
	}
	return flags, nil
}

// docRow matches a row of the flag table in docs/flags.md:
// | `--name` | `type` | `default` | meaning |   (type and default may be empty)
var docRow = regexp.MustCompile("^\\|\\s*`--([a-z0-9][a-z0-9-]*)`\\s*\\|\\s*(?:`([^`]*)`)?\\s*\\|\\s*(?:`([^`]*)`)?\\s*\\|")

// parseDoc returns the flags listed in the tables of docs/flags.md.
func parseDoc(doc string) []flag {
	var flags []flag
	for _, line := range strings.Split(doc, "\n") {
		m := docRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		flags = append(flags, flag{Name: m[1], Type: m[2], Default: m[3]})
	}
	return flags
}

func TestParseHelp(t *testing.T) {
	help := `Usage:
  ipvs-proxy run [flags]

Flags:
      --cluster-cidr string            Comma-separated pod CIDRs
      --config string                  Configuration file
  -h, --help                           help for run
      --ipvs-scheduler string          Default IPVS scheduler (default "rr")
      --ipvs-strict-arp                Set arp_ignore=1
      --masquerade-bit int             The fwmark bit (0-31) (default 14)
      --nodeport-addresses strings     CIDRs of the local addresses
                                       served on
      --sync-period duration           How often (default 30s)

Global Flags:
      --log-level string   Log level (default "info")
`
	got, err := parseHelp(help)
	if err != nil {
		t.Fatal(err)
	}
	want := []flag{
		{"cluster-cidr", "string", ""},
		{"config", "string", ""},
		{"ipvs-scheduler", "string", "rr"},
		{"ipvs-strict-arp", "", ""},
		{"masquerade-bit", "int", "14"},
		{"nodeport-addresses", "strings", ""},
		{"sync-period", "duration", "30s"},
		{"log-level", "string", "info"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseHelp:\n got %v\nwant %v", got, want)
	}
}

func TestParseDoc(t *testing.T) {
	doc := "| Flag | Type | Default | Meaning |\n" +
		"| --- | --- | --- | --- |\n" +
		"| `--config` | `string` | | The file |\n" +
		"| `--ipvs-strict-arp` | | | ARP |\n" +
		"| `--sync-period` | `duration` | `30s` | Resync |\n" +
		"Text mentioning `--not-a-row` is not a row.\n"
	got := parseDoc(doc)
	want := []flag{
		{"config", "string", ""},
		{"ipvs-strict-arp", "", ""},
		{"sync-period", "duration", "30s"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseDoc:\n got %v\nwant %v", got, want)
	}
}

// TestFlagsDocMatchesRunHelp builds the binary, runs `ipvs-proxy run
// --help`, and requires docs/flags.md to list exactly the same flags, each
// with the same type and default, each once.
func TestFlagsDocMatchesRunHelp(t *testing.T) {
	bin := buildBinary(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "run", "--help")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ipvs-proxy run --help: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	help, err := parseHelp(stdout.String())
	if err != nil {
		t.Fatalf("ipvs-proxy run --help: %v", err)
	}
	raw, err := os.ReadFile(flagsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseDoc(string(raw))
	if len(doc) == 0 {
		t.Fatalf("%s lists no flags", flagsDoc)
	}

	byName := map[string]flag{}
	for _, f := range doc {
		if _, dup := byName[f.Name]; dup {
			t.Errorf("%s lists --%s twice", flagsDoc, f.Name)
		}
		byName[f.Name] = f
	}
	for _, h := range help {
		d, ok := byName[h.Name]
		if !ok {
			t.Errorf("--%s is in `run --help` but not in %s; add the row: | `--%s` | %s | %s | ... |",
				h.Name, flagsDoc, h.Name, code(h.Type), code(h.Default))
			continue
		}
		delete(byName, h.Name)
		if d != h {
			t.Errorf("%s disagrees with `run --help`:\n docs %v\n help %v", flagsDoc, d, h)
		}
	}
	for name := range byName {
		t.Errorf("--%s is in %s but not in `run --help`", name, flagsDoc)
	}
}

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}
