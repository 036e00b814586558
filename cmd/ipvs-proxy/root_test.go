package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/version"
)

func TestVersion(t *testing.T) {
	old := version.Version
	version.Version = "v9.8.7-test"
	defer func() { version.Version = old }()
	var out, errOut bytes.Buffer
	if code := Main([]string{"version"}, nil, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "ipvs-proxy v9.8.7-test (go") {
		t.Errorf("version printed %q", out.String())
	}
}

// TestBadInput: every kind of bad input exits 2 with one line on stderr
// naming what is wrong, and prints nothing on stdout.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	good := write("good.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n")
	broken := write("broken.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Service\n  metadata: {name: x\n")
	unknown := write("unknown.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\napiVersion: v1\nkind: Sevrice\nmetadata: {name: typo, namespace: web}\n")
	twoNodes := write("nodes.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.1}]}\n---\n"+
		"apiVersion: v1\nkind: Node\nmetadata: {name: n2}\nstatus: {addresses: [{type: InternalIP, address: 10.0.0.2}]}\n")

	tests := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"no file", []string{"plan", "--node-ip", "10.0.0.1"}, "", "-f FILE is required"},
		{"no node ip", []string{"plan", "-f", good, "--node-name", "n1"}, "", "--node-ip is required"},
		{"bad node ip", []string{"plan", "-f", good, "--node-ip", "10.0.0.256"}, "", `invalid argument "10.0.0.256" for "--node-ip" flag`},
		{"bad cidr", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--cluster-cidr", "10.0.0.0/40"}, "", `invalid argument "10.0.0.0/40" for "--cluster-cidr" flag`},
		{"mapped cidr shorter than /96", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--protected-cidrs", "::ffff:192.0.2.0/64"}, "",
			`invalid argument "::ffff:192.0.2.0/64" for "--protected-cidrs" flag: "::ffff:192.0.2.0/64": an IPv4-mapped IPv6 CIDR shorter than /96`},
		{"nodeport primary with cidr", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--nodeport-addresses", "primary,10.0.0.0/8"}, "", `"--nodeport-addresses" flag`},
		{"bad masquerade bit", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--node-name", "n1", "--masquerade-bit", "32"}, "", `"--iptables-masquerade-bit" flag: must be 0-31`},
		{"empty scheduler", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--node-name", "n1", "--ipvs-scheduler", ""}, "", `invalid argument "" for "--ipvs-scheduler" flag: must be one of dh,`},
		{"unknown scheduler", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--node-name", "n1", "--ipvs-scheduler", "roundrobin"}, "", `invalid argument "roundrobin" for "--ipvs-scheduler" flag`},
		{"bad output", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--node-name", "n1", "-o", "yaml"}, "", `invalid argument "yaml" for "-o" flag`},
		{"unknown flag", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "--proxy-mode", "ipvs"}, "", "unknown flag: --proxy-mode"},
		{"stray argument", []string{"plan", "-f", good, "--node-ip", "10.0.0.1", "extra"}, "", `unknown command "extra"`},
		{"unknown command", []string{"plna"}, "", `unknown command "plna" for "ipvs-proxy"; did you mean plan?`},
		{"missing file", []string{"plan", "-f", filepath.Join(dir, "nope.yaml"), "--node-ip", "10.0.0.1", "--node-name", "n1"}, "", "nope.yaml: no such file"},
		{"broken document", []string{"plan", "-f", good, "-f", broken, "--node-ip", "10.0.0.1", "--node-name", "n1"}, "", broken + ": document 1: unparseable document"},
		{"unknown kind", []string{"plan", "-f", unknown, "--node-ip", "10.0.0.1", "--node-name", "n1"}, "", unknown + ": document 1 (Sevrice web/typo): unknown kind"},
		{"broken stdin", []string{"plan", "-f", "-", "--node-ip", "10.0.0.1", "--node-name", "n1"}, "{\"apiVersion\": ", "<stdin>: document 0: unparseable document"},
		{"stdin twice", []string{"plan", "-f", "-", "-f", "-", "--node-ip", "10.0.0.1", "--node-name", "n1"}, "", "stdin (-f -) can be read only once"},
		{"node name not inferable", []string{"plan", "-f", good, "--node-ip", "10.0.0.9"}, "", "--node-name is required: no Node in the input has one of the --node-ip addresses"},
		{"node name ambiguous", []string{"plan", "-f", twoNodes, "--node-ip", "10.0.0.1,10.0.0.2"}, "", "--node-name is required: Nodes n1, n2 all have"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, strings.NewReader(tt.stdin), &out, &errOut)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if out.Len() > 0 {
				t.Errorf("stdout: %q", out.String())
			}
			msg := errOut.String()
			if !strings.HasPrefix(msg, "ipvs-proxy: ") || strings.Count(msg, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", msg)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("stderr %q does not contain %q", msg, tt.want)
			}
		})
	}
}

// TestNodeNameInferred: without --node-name, the Node that has a --node-ip
// address is this node; the plan equals the one with --node-name.
func TestNodeNameInferred(t *testing.T) {
	path := filepath.Join(planDir, "local-policies.yaml")
	nodes := filepath.Join(planDir, "common", "nodes.yaml")
	var a, b, errOut bytes.Buffer
	if code := Main([]string{"plan", "-f", path, "-f", nodes, "--node-ip", "10.10.0.211"}, nil, &a, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if code := Main([]string{"plan", "-f", path, "-f", nodes, "--node-ip", "10.10.0.211", "--node-name", "n1"}, nil, &b, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if a.String() != b.String() || a.Len() == 0 {
		t.Errorf("inferred node plans differently:\n%s", lineDiff(b.String(), a.String()))
	}
}

// TestIgnoredKinds: objects the proxy does not use are noted on stderr and
// do not change the plan.
func TestIgnoredKinds(t *testing.T) {
	path := filepath.Join(planDir, "wordpress-mysql.yaml")
	nodes := filepath.Join(planDir, "common", "nodes.yaml")
	args := []string{"plan", "-f", path, "-f", nodes, "-f", "-", "--node-ip", "10.10.0.211", "--node-name", "n1"}
	var a, b, errOut bytes.Buffer
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: wordpress-mysql-0, namespace: default}\n"
	if code := Main(args, strings.NewReader(pod), &a, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "ignored 1 object(s)") || !strings.Contains(errOut.String(), "Pod default/wordpress-mysql-0") {
		t.Errorf("stderr %q", errOut.String())
	}
	errOut.Reset()
	if code := Main(args, strings.NewReader(""), &b, &errOut); code != exitOK || errOut.Len() > 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if a.String() != b.String() {
		t.Errorf("an ignored Pod changed the plan")
	}
}

// TestExitStatusesShared: bad usage exits 2 from every subcommand, and
// --help of the root and of recover shows the one table of exit statuses.
func TestExitStatusesShared(t *testing.T) {
	for _, sub := range newRootCommand().Commands() {
		var stderr bytes.Buffer
		if code := Main([]string{sub.Name(), "--no-such-flag"}, nil, new(bytes.Buffer), &stderr); code != exitUsage {
			t.Errorf("%s --no-such-flag: exit %d, want %d: %s", sub.Name(), code, exitUsage, stderr.String())
		}
	}
	for _, args := range [][]string{{"--help"}, {"recover", "--help"}} {
		var stdout bytes.Buffer
		if code := Main(args, nil, &stdout, new(bytes.Buffer)); code != exitOK || !strings.Contains(stdout.String(), exitStatusHelp) {
			t.Errorf("%v: exit %d, output lacks the exit status table:\n%s", args, code, stdout.String())
		}
	}
}

// writeFile writes body to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
