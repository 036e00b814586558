package vmtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestScanConsole(t *testing.T) {
	const nonce = "0123abcd"
	tests := []struct {
		name      string
		in        string
		wantOut   string
		want      consoleState
		wantSkips []string
	}{
		{
			name:    "ready, two exits, done",
			in:      "boot\r\n@@vmtest 0123abcd ready\r\n@@vmtest 0123abcd start 0\n=== RUN TestA\n@@vmtest 0123abcd exit 0 0\n@@vmtest 0123abcd start 1\n@@vmtest 0123abcd exit 1 3\n@@vmtest 0123abcd done\n",
			wantOut: "boot\n=== RUN TestA\n",
			want:    consoleState{ready: true, done: true, exits: []int{0, 3}},
		},
		{
			name:    "a marker with another nonce is test output, not a marker",
			in:      "@@vmtest ffff ready\n@@vmtest ffff exit 0 0\n",
			wantOut: "@@vmtest ffff ready\n@@vmtest ffff exit 0 0\n",
			want:    consoleState{},
		},
		{
			name:    "marker glued to unterminated output keeps the output",
			in:      "PASS@@vmtest 0123abcd exit 0 0\n",
			wantOut: "PASS\n",
			want:    consoleState{exits: []int{0}},
		},
		{
			name:    "fail marker",
			in:      "@@vmtest 0123abcd fail ipvs modprobe failed\n",
			wantOut: "",
			want:    consoleState{failKind: "ipvs", failMsg: "modprobe failed"},
		},
		{
			name:    "kernel panic is recorded",
			in:      "[    0.028000] Kernel panic - not syncing: IO-APIC + timer doesn't work!\n",
			wantOut: "[    0.028000] Kernel panic - not syncing: IO-APIC + timer doesn't work!\n",
			want:    consoleState{panic: "Kernel panic - not syncing: IO-APIC + timer doesn't work!"},
		},
		{
			name:      "skips are recorded, subtests too",
			in:        "--- SKIP: TestA (0.00s)\n    --- SKIP: TestB/sub (0.00s)\n--- PASS: TestC (0.00s)\n",
			wantOut:   "--- SKIP: TestA (0.00s)\n    --- SKIP: TestB/sub (0.00s)\n--- PASS: TestC (0.00s)\n",
			wantSkips: []string{"TestA (0.00s)", "TestB/sub (0.00s)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			res := &Result{}
			st := scanConsole(strings.NewReader(tt.in), &out, nonce, time.Now(), res)
			if out.String() != tt.wantOut {
				t.Errorf("output = %q, want %q", out.String(), tt.wantOut)
			}
			if st.ready != tt.want.ready || st.done != tt.want.done || st.failKind != tt.want.failKind ||
				st.failMsg != tt.want.failMsg || st.panic != tt.want.panic || !equalInts(st.exits, tt.want.exits) {
				t.Errorf("state = %+v, want %+v", st, tt.want)
			}
			if len(st.durations) != len(st.exits) {
				t.Errorf("%d durations for %d exits", len(st.durations), len(st.exits))
			}
			if strings.Join(res.Skipped, "|") != strings.Join(tt.wantSkips, "|") {
				t.Errorf("skipped = %q, want %q", res.Skipped, tt.wantSkips)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLoadOrder(t *testing.T) {
	deps := map[string]moduleDep{
		"9p":           {path: "kernel/fs/9p/9p.ko", deps: []string{"9pnet", "netfs"}},
		"9pnet":        {path: "kernel/net/9p/9pnet.ko"},
		"netfs":        {path: "kernel/fs/netfs/netfs.ko"},
		"9pnet_virtio": {path: "kernel/net/9p/9pnet_virtio.ko", deps: []string{"9pnet", "virtio_ring"}},
	}
	builtin := map[string]bool{"virtio_ring": true}
	got, err := loadOrder(deps, builtin, []string{"9pnet_virtio", "9p"})
	if err != nil {
		t.Fatal(err)
	}
	want := "kernel/net/9p/9pnet.ko kernel/net/9p/9pnet_virtio.ko kernel/fs/netfs/netfs.ko kernel/fs/9p/9p.ko"
	if strings.Join(got, " ") != want {
		t.Errorf("order = %v, want %s", got, want)
	}
	if _, err := loadOrder(deps, builtin, []string{"ip_vs"}); !errors.Is(err, ErrNoKernel) {
		t.Errorf("unknown module: err = %v, want ErrNoKernel", err)
	}
}

func TestCPIOLayout(t *testing.T) {
	var b bytes.Buffer
	c := &cpioWriter{w: &b}
	c.Dir("bin")
	c.File("init", modeExec, []byte("#!/bin/sh\n"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if b.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-aligned", b.Len())
	}
	for _, want := range []string{"070701", "bin\x00", "init\x00", "#!/bin/sh\n", "TRAILER!!!\x00"} {
		if !strings.Contains(s, want) {
			t.Errorf("archive lacks %q", want)
		}
	}
	// newc header: magic(6) + 13 fields of 8 hex digits; the mode field is second.
	if got := s[6+8 : 6+16]; got != "000041ED" {
		t.Errorf("first entry mode = %s, want 000041ED (dir 0755)", got)
	}
}

func TestJobScriptQuotesArgsAndEnv(t *testing.T) {
	cfg := Config{
		Env:         []string{"A=it's", "B=x y"},
		ForwardPort: 6443,
		Jobs:        []Job{{Bin: "/t/a.test", Args: []string{"-test.run", "Test'X"}, Dir: "/src/a"}},
	}
	s := jobScript(cfg, "n0")
	for _, want := range []string{
		`export A='it'\''s'`,
		`export B='x y'`,
		`export VMTEST_API_ADDR='10.0.2.100:6443'`,
		`(cd '/src/a' && exec '/t/a.test' '-test.run' 'Test'\''X' </dev/null)`,
		`echo "@@vmtest n0 start 0"`,
		`echo "@@vmtest n0 exit 0 $?"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("job script lacks %s:\n%s", want, s)
		}
	}
}

func TestValidEnvName(t *testing.T) {
	for name, want := range map[string]bool{"A": true, "_x1": true, "K8S_API": true, "": false, "1A": false, "A-B": false, "A B": false} {
		if got := validEnvName(name); got != want {
			t.Errorf("validEnvName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRunFailsLoudlyWithoutKernel(t *testing.T) {
	bin := writeExec(t)
	_, err := Run(context.Background(), Config{KernelRoot: t.TempDir(), Jobs: []Job{{Bin: bin}}})
	if !errors.Is(err, ErrNoKernel) {
		t.Fatalf("err = %v, want ErrNoKernel", err)
	}
	t.Setenv(KernelRootEnv, "")
	t.Chdir(t.TempDir())
	if _, err := FindKernelRoot(); !errors.Is(err, ErrNoKernel) {
		t.Fatalf("FindKernelRoot outside the repo: err = %v, want ErrNoKernel", err)
	}
}

func TestRunFailsLoudlyWithoutQEMU(t *testing.T) {
	root := fakeKernelRoot(t)
	bin := writeExec(t)
	_, err := Run(context.Background(), Config{KernelRoot: root, QEMU: "/nonexistent/qemu", Jobs: []Job{{Bin: bin}}})
	if !errors.Is(err, ErrBoot) || !strings.Contains(err.Error(), "/nonexistent/qemu") {
		t.Fatalf("err = %v, want ErrBoot naming the qemu binary", err)
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	bin := writeExec(t)
	for name, cfg := range map[string]Config{
		"no jobs":        {},
		"bad env":        {Env: []string{"NOEQUALS"}, Jobs: []Job{{Bin: bin}}},
		"missing binary": {Jobs: []Job{{Bin: filepath.Join(t.TempDir(), "x.test")}}},
		"not executable": {Jobs: []Job{{Bin: writeFile(t, 0o644)}}},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: Run succeeded", name)
		}
	}
}

// fakeKernelRoot is enough of an unpacked kernel for LoadKernel and the initramfs.
func fakeKernelRoot(t *testing.T) string {
	root := t.TempDir()
	mods := filepath.Join(root, "lib/modules/6.1.0-test")
	must(t, os.MkdirAll(filepath.Join(root, "boot"), 0o755))
	must(t, os.MkdirAll(mods, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "boot/vmlinuz-6.1.0-test"), []byte("kernel"), 0o644))
	var dep strings.Builder
	for _, m := range initramfsModules {
		rel := "kernel/" + m + ".ko"
		dep.WriteString(rel + ":\n")
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(mods, rel)), 0o755))
		must(t, os.WriteFile(filepath.Join(mods, rel), []byte("ko"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(mods, "modules.dep"), []byte(dep.String()), 0o644))
	return root
}

func writeExec(t *testing.T) string { return writeFile(t, 0o755) }

func writeFile(t *testing.T, mode os.FileMode) string {
	p := filepath.Join(t.TempDir(), "x.test")
	must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), mode))
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestQEMUHostForwards: each HostForward is one hostfwd on the forwarded
// port's netdev, bound to the host's loopback only.
func TestQEMUHostForwards(t *testing.T) {
	args := qemuArgs(Kernel{}, "initrd", Config{ForwardPort: 6443,
		HostForwards: []HostForward{{HostPort: 40001, GuestPort: 10250}, {HostPort: 40002, GuestPort: 10251}}})
	var netdev string
	for i, a := range args {
		if a == "-netdev" && i+1 < len(args) {
			netdev = args[i+1]
		}
	}
	for _, want := range []string{"hostfwd=tcp:127.0.0.1:40001-10.0.2.15:10250", "hostfwd=tcp:127.0.0.1:40002-10.0.2.15:10251", "restrict=on"} {
		if !strings.Contains(netdev, want) {
			t.Errorf("-netdev %q lacks %q", netdev, want)
		}
	}
	if err := (&Config{HostForwards: []HostForward{{1, 2}}}).setDefaults(); err == nil {
		t.Error("HostForwards without ForwardPort accepted")
	}
}
