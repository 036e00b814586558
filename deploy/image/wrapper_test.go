package image

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBackends makes a directory standing in for /usr/sbin: for each of
// iptables/ip6tables and nft/legacy, "<fam>-<mode>" and
// "<fam>-<mode>-restore" print what they are and their arguments, and
// "<fam>-<mode>-save" prints the file saves/<fam>-<mode> (the rules that
// backend holds) and records its arguments in saves.log. The wrapper is linked under the names it stands in for,
// and "alternatives" records its calls in alternatives.log.
func fakeBackends(t *testing.T, saves map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "saves"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, mode := range []string{"nft", "legacy"} {
			b := fam + "-" + mode
			write(b, `echo "`+b+` $*"`)
			write(b+"-restore", `echo "`+b+`-restore $*"`)
			write(b+"-save", `echo "`+b+`-save $*" >> "`+filepath.Join(dir, "saves.log")+`"; cat "`+filepath.Join(dir, "saves", b)+`" 2>/dev/null; exit 0`)
			if err := os.WriteFile(filepath.Join(dir, "saves", b), []byte(saves[b]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("alternatives", `echo "$*" >> "`+filepath.Join(dir, "alternatives.log")+`"`)
	wrapper, err := filepath.Abs("iptables-wrapper")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"iptables", "ip6tables", "iptables-save", "iptables-restore", "ip6tables-save", "ip6tables-restore", "something-else"} {
		if err := os.Symlink(wrapper, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runWrapper(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = append(os.Environ(), "IPTABLES_WRAPPER_SBIN="+dir, "IPTABLES_WRAPPER_ALTERNATIVES="+filepath.Join(dir, "alternatives"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestWrapperPicksTheNodesBackend(t *testing.T) {
	const hint = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
	const canary = "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"
	const twoRules = "*filter\n-A INPUT -j ACCEPT\n-A FORWARD -j ACCEPT\nCOMMIT\n"
	const oneRule = "*filter\n-A INPUT -j ACCEPT\nCOMMIT\n"
	tests := []struct {
		name  string
		saves map[string]string
		want  string // backend mode
	}{
		{"empty node: nft", nil, "nft"},
		{"kubelet hint in legacy", map[string]string{"iptables-legacy": hint}, "legacy"},
		{"kubelet canary in legacy ip6tables", map[string]string{"ip6tables-legacy": canary}, "legacy"},
		{"kubelet hint in nft", map[string]string{"iptables-nft": hint}, "nft"},
		{"hint in nft wins over more legacy rules", map[string]string{"ip6tables-nft": canary, "iptables-legacy": twoRules}, "nft"},
		{"no hint, more legacy rules", map[string]string{"iptables-legacy": twoRules, "iptables-nft": oneRule}, "legacy"},
		{"no hint, more legacy rules counted over both families", map[string]string{"ip6tables-legacy": oneRule, "iptables-legacy": oneRule, "iptables-nft": oneRule}, "legacy"},
		{"no hint, equal rules: nft", map[string]string{"iptables-legacy": oneRule, "iptables-nft": oneRule}, "nft"},
		{"no hint, more nft rules", map[string]string{"iptables-legacy": oneRule, "iptables-nft": twoRules}, "nft"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fakeBackends(t, tt.saves)
			for _, c := range []struct{ name, want string }{
				{"iptables", "iptables-" + tt.want + " -w -S"},
				{"ip6tables", "ip6tables-" + tt.want + " -w -S"},
				{"iptables-restore", "iptables-" + tt.want + "-restore -w -S"},
				{"ip6tables-restore", "ip6tables-" + tt.want + "-restore -w -S"},
			} {
				out, err := runWrapper(t, dir, c.name, "-w", "-S")
				if err != nil {
					t.Fatalf("%s: %v\n%s", c.name, err, out)
				}
				if got := strings.TrimSpace(out); got != c.want {
					t.Errorf("%s ran %q, want %q", c.name, got, c.want)
				}
			}
			noLegacyTable(t, dir)
			log, err := os.ReadFile(filepath.Join(dir, "alternatives.log"))
			if err != nil {
				t.Fatal(err)
			}
			want := "--set iptables " + dir + "/iptables-" + tt.want + "\n" +
				"--set ip6tables " + dir + "/ip6tables-" + tt.want + "\n"
			if got := string(log); got != strings.Repeat(want, 4) {
				t.Errorf("alternatives calls:\n%s\nwant 4 times:\n%s", got, want)
			}
		})
	}
}

// noLegacyTable fails the test if the wrapper ran a legacy -save with -t:
// iptables-legacy-save -t TABLE creates TABLE in the kernel when it is not
// there (the VM test in test/e2e/deploy shows it on a real nft host).
func noLegacyTable(t *testing.T, dir string) {
	t.Helper()
	log, err := os.ReadFile(filepath.Join(dir, "saves.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if strings.Contains(l, "-legacy-save") && strings.Contains(l, "-t") {
			t.Errorf("ran %q: reading a legacy table by name creates it", l)
		}
	}
}

func TestWrapperSaveRunsTheBackendsSave(t *testing.T) {
	dir := fakeBackends(t, map[string]string{"iptables-legacy": "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\n-A X\nCOMMIT\n"})
	out, err := runWrapper(t, dir, "iptables-save")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "-A X") {
		t.Errorf("iptables-save printed %q, want the legacy backend's rules", out)
	}
}

func TestWrapperRefusesOtherNames(t *testing.T) {
	dir := fakeBackends(t, nil)
	out, err := runWrapper(t, dir, "something-else")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("something-else: err %v, want exit status 2\n%s", err, out)
	}
	if !strings.Contains(out, "want iptables") {
		t.Errorf("something-else printed %q", out)
	}
}
