// Package vmtest boots Debian's kernel (which has IPVS, dummy, veth and the
// netfilter modules) under qemu with TCG and runs Go test binaries built on
// the host inside it, as root, streaming their output and returning their exit
// status. The guest sees the host's root filesystem read-only over 9p with a
// tmpfs overlay on top, so binaries, ipvsadm, ipset, iptables and ip are the
// host's own. The guest has no network device unless a port is forwarded, and
// then it reaches exactly that host port at 10.0.2.100:PORT.
//
// It owns only the VM it starts and the temporary directory holding the
// initramfs; it never touches the host's network or kernel. The command is
// test/vmtest/cmd/vmrun; see docs/testing.md.
package vmtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors; Run wraps them, check with errors.Is.
var (
	// ErrNoKernel: the unpacked kernel is missing (run `make deps`).
	ErrNoKernel = errors.New("vmtest: kernel not available")
	// ErrBoot: the VM did not reach the point where tests run.
	ErrBoot = errors.New("vmtest: VM failed to boot")
	// ErrNoIPVS: the guest could not load IPVS or a module the tests need.
	ErrNoIPVS = errors.New("vmtest: guest lacks IPVS")
	// ErrTimeout: the run exceeded Config.Timeout.
	ErrTimeout = errors.New("vmtest: timeout")
	// ErrFailed: at least one test binary exited non-zero.
	ErrFailed = errors.New("vmtest: test binary failed")
	// ErrSkipped: Config.FailOnSkip is set and a test printed "--- SKIP".
	ErrSkipped = errors.New("vmtest: tests skipped")
)

// GuestModules are loaded (modprobe) before any test runs; a failure is ErrNoIPVS.
// Everything else (schedulers, dummy, veth, sctp, netfilter) the guest kernel
// loads on first use through /sbin/modprobe, and test/ktest loads explicitly.
var GuestModules = []string{"ip_vs", "ip_vs_rr"}

// initramfsModules are insmod'ed by /init, with their dependencies, to mount the host root.
var initramfsModules = []string{"virtio_pci", "9pnet_virtio", "9p", "overlay"}

// Job is one test binary to run in the guest.
type Job struct {
	// Bin is the test binary (made absolute; the guest sees the host's paths).
	Bin string
	// Args are passed to Bin, e.g. "-test.v", "-test.run", "TestX".
	Args []string
	// Dir is the working directory; empty means Bin's package source
	// directory when Bin is a `go test -c` binary of a module above the
	// runner's working directory (like `go test`), else the working directory.
	Dir string
}

// Config describes one VM run.
type Config struct {
	// KernelRoot holds boot/vmlinuz-* and lib/modules/*; empty means FindKernelRoot.
	KernelRoot string
	// Jobs run in order, each to completion, whatever the previous status.
	Jobs []Job
	// Shell, instead of Jobs, gives an interactive root shell on the console.
	Shell bool
	// Env entries "KEY=VAL" are exported to every job.
	Env []string
	// ForwardPort, when non-zero, lets the guest reach host 127.0.0.1:PORT
	// at 10.0.2.100:PORT and nothing else.
	ForwardPort int
	// HostForwards let the host reach guest ports: each is qemu's
	// hostfwd, host 127.0.0.1:HostPort to the guest's 10.0.2.15:GuestPort
	// in its root namespace. They need ForwardPort (its NIC).
	HostForwards []HostForward
	// Timeout bounds the whole run, boot included; zero means 30 minutes.
	Timeout time.Duration
	// CPUs and MemoryMiB size the VM; zero means 2 and 3072.
	CPUs, MemoryMiB int
	// Output receives the guest console without marker lines; nil means os.Stdout.
	Output io.Writer
	// QEMU is the qemu binary; empty means qemu-system-x86_64.
	QEMU string
	// KernelMessages shows kernel info messages on the console (loglevel 7).
	KernelMessages bool
	// FailOnSkip makes a run that printed any "--- SKIP: TestX" line (go
	// test -test.v output) fail with ErrSkipped: under `make test-kernel` a
	// kernel test that skips is a test that did not run.
	FailOnSkip bool
}

// HostForward is one host port forwarded into the guest.
type HostForward struct{ HostPort, GuestPort int }

// JobResult is one job's exit status as reported by the guest.
type JobResult struct {
	Job      Job
	ExitCode int
	// Duration is the job's wall time as the host saw it on the console.
	Duration time.Duration
}

// Result is what a run measured.
type Result struct {
	// Boot is the time from starting qemu to the guest being ready to run jobs.
	Boot time.Duration
	// Total is the time from starting qemu to its exit.
	Total time.Duration
	Jobs  []JobResult
	// Skipped lists the "--- SKIP: TestX" lines the tests printed.
	Skipped []string
}

// Run boots the VM, runs cfg.Jobs (or a shell) and returns their results.
// The error is nil only when the VM booted, every job reported an exit status
// and every status was 0.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if !cfg.Shell && len(cfg.Jobs) == 0 {
		return nil, errors.New("vmtest: no test binaries given")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	jobs, err := resolveJobs(cfg.Jobs)
	if err != nil {
		return nil, err
	}
	cfg.Jobs = jobs

	root := cfg.KernelRoot
	if root == "" {
		if root, err = FindKernelRoot(); err != nil {
			return nil, err
		}
	}
	kern, err := LoadKernel(root)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "vmtest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	nonce := newNonce()
	initrd := filepath.Join(tmp, "initramfs.cpio")
	if err := writeInitramfs(initrd, kern, cfg, nonce); err != nil {
		return nil, fmt.Errorf("%w: build initramfs: %v", ErrBoot, err)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.QEMU, qemuArgs(kern, initrd, cfg)...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stderr = os.Stderr
	if cfg.Shell {
		cmd.Stdin, cmd.Stdout = os.Stdin, os.Stdout
		start := time.Now()
		err := cmd.Run()
		return &Result{Total: time.Since(start)}, err
	}
	// Stdin stays /dev/null: CI has none and qemu must never read a terminal.
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %v (run `make deps`)", ErrBoot, cfg.QEMU, err)
	}
	res := &Result{}
	st := scanConsole(out, cfg.Output, nonce, start, res)
	waitErr := cmd.Wait()
	res.Total = time.Since(start)
	for i, code := range st.exits {
		if i < len(cfg.Jobs) {
			res.Jobs = append(res.Jobs, JobResult{Job: cfg.Jobs[i], ExitCode: code, Duration: st.durations[i]})
		}
	}
	if err := verdict(ctx, cfg, &st, res, waitErr); err != nil {
		return res, err
	}
	return res, nil
}

// setDefaults fills what cfg leaves unset and checks its environment.
func (cfg *Config) setDefaults() error {
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Minute
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 2
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 3072
	}
	if cfg.Output == nil {
		cfg.Output = os.Stdout
	}
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	if len(cfg.HostForwards) > 0 && cfg.ForwardPort == 0 {
		return errors.New("vmtest: HostForwards need ForwardPort (the guest's NIC)")
	}
	for _, e := range cfg.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || !validEnvName(k) {
			return fmt.Errorf("vmtest: bad -env %q: want KEY=VALUE", e)
		}
	}
	return nil
}

// verdict is the run's error, from how the guest ended (st, qemu's
// waitErr) and the binaries' exit codes; nil when all passed.
func verdict(ctx context.Context, cfg Config, st *consoleState, res *Result, waitErr error) error {
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("%w after %s (%d of %d binaries finished)", ErrTimeout, cfg.Timeout, len(res.Jobs), len(cfg.Jobs))
	case st.failKind == "ipvs":
		return fmt.Errorf("%w: %s", ErrNoIPVS, st.failMsg)
	case st.failKind != "":
		return fmt.Errorf("%w: %s", ErrBoot, st.failMsg)
	case st.panic != "" && !st.ready:
		return fmt.Errorf("%w: %s", ErrBoot, st.panic)
	case st.panic != "":
		return fmt.Errorf("%w: the guest kernel panicked after %d of %d binaries: %s", ErrFailed, len(res.Jobs), len(cfg.Jobs), st.panic)
	case !st.ready:
		return fmt.Errorf("%w: the guest never became ready (qemu: %v); rerun with -kernel-messages", ErrBoot, waitErr)
	case !st.done || len(res.Jobs) != len(cfg.Jobs):
		return fmt.Errorf("%w: the guest stopped after %d of %d binaries without reporting (crash or panic? qemu: %v)",
			ErrBoot, len(res.Jobs), len(cfg.Jobs), waitErr)
	}
	var failed []string
	for _, j := range res.Jobs {
		if j.ExitCode != 0 {
			failed = append(failed, fmt.Sprintf("%s (exit %d)", j.Job.Bin, j.ExitCode))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s%s", ErrFailed, strings.Join(failed, ", "), digestSuffix(st.reports, cfg.Jobs))
	}
	if cfg.FailOnSkip && len(res.Skipped) > 0 {
		return fmt.Errorf("%w: %s", ErrSkipped, strings.Join(res.Skipped, "; "))
	}
	return nil
}

type consoleState struct {
	ready, done       bool
	exits             []int
	durations         []time.Duration
	panic             string
	jobStart          time.Time
	failKind, failMsg string
	// reports are the "name_test.go:N: ..." lines, for the failure digest.
	reports []report
}

// scanConsole copies the console to w, dropping marker lines and carriage
// returns, and records what the markers say.
func scanConsole(r io.Reader, w io.Writer, nonce string, start time.Time, res *Result) consoleState {
	var st consoleState
	prefix := "@@vmtest " + nonce + " "
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			clean := strings.TrimRight(line, "\r\n")
			if i := strings.Index(clean, prefix); i >= 0 {
				if i > 0 {
					fmt.Fprintln(w, clean[:i])
				}
				f := strings.Fields(clean[i+len(prefix):])
				switch {
				case len(f) == 0:
				case f[0] == "ready":
					st.ready = true
					res.Boot = time.Since(start)
				case f[0] == "done":
					st.done = true
				case f[0] == "start":
					st.jobStart = time.Now()
				case f[0] == "exit" && len(f) == 3:
					code, _ := strconv.Atoi(f[2])
					st.exits = append(st.exits, code)
					var d time.Duration
					if !st.jobStart.IsZero() {
						d = time.Since(st.jobStart)
					}
					st.durations = append(st.durations, d)
				case f[0] == "fail" && len(f) >= 2:
					st.failKind = f[1]
					st.failMsg = strings.Join(f[2:], " ")
				}
			} else {
				io.WriteString(w, strings.ReplaceAll(line, "\r", ""))
				if i := strings.Index(clean, "Kernel panic - "); i >= 0 && st.panic == "" {
					st.panic = clean[i:]
				}
				if r, ok := parseReport(clean); ok && len(st.reports) < maxReports {
					st.reports = append(st.reports, r)
				}
				if t := strings.TrimSpace(clean); strings.HasPrefix(t, "--- SKIP: ") {
					res.Skipped = append(res.Skipped, strings.TrimPrefix(t, "--- SKIP: "))
				}
			}
		}
		if err != nil {
			return st
		}
	}
}

func qemuArgs(k Kernel, initrd string, cfg Config) []string {
	loglevel := "loglevel=4"
	if cfg.KernelMessages {
		loglevel = "loglevel=7"
	}
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", strconv.Itoa(cfg.CPUs), "-m", strconv.Itoa(cfg.MemoryMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", k.Image, "-initrd", initrd,
		// no_timer_check: on a loaded host TCG's timer can miss the kernel's
		// IO-APIC timer check, which then panics ("IO-APIC + timer doesn't work").
		"-append", "console=ttyS0 " + loglevel + " panic=-1 mitigations=off no_timer_check 8250.nr_uarts=1 rdinit=/init",
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
	}
	if cfg.Shell {
		args = append(args, "-serial", "mon:stdio")
	} else {
		args = append(args, "-serial", "stdio", "-monitor", "none")
	}
	if cfg.ForwardPort != 0 {
		p := strconv.Itoa(cfg.ForwardPort)
		netdev := "user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:" + p + "-cmd:busybox nc 127.0.0.1 " + p
		for _, f := range cfg.HostForwards {
			netdev += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-10.0.2.15:%d", f.HostPort, f.GuestPort)
		}
		args = append(args,
			"-netdev", netdev,
			"-device", "virtio-net-pci,netdev=n0")
	}
	return args
}

func writeInitramfs(path string, k Kernel, cfg Config, nonce string) error {
	deps, err := readModulesDep(k.Modules)
	if err != nil {
		return err
	}
	order, err := loadOrder(deps, readBuiltin(k.Modules), initramfsModules)
	if err != nil {
		return err
	}
	busybox, err := findBusybox()
	if err != nil {
		return err
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	c := &cpioWriter{w: bw}
	for _, d := range []string{"bin", "dev", "proc", "sys", "vmtest", "vmtest/kernel"} {
		c.Dir(d)
	}
	c.CharDev("dev/console", 5, 1)
	c.File("bin/busybox", modeExec, bb)
	c.File("init", modeExec, []byte(initScript))
	c.File("vmtest/stage2", modeFile, []byte(stage2Script))
	c.File("vmtest/env", modeFile, []byte(envFile(k, cfg, nonce)))
	c.File("vmtest/job", modeFile, []byte(jobScript(cfg, nonce)))
	var names []string
	dirs := map[string]bool{}
	for _, rel := range order {
		data, err := os.ReadFile(filepath.Join(k.Modules, rel))
		if err != nil {
			return err
		}
		if strings.HasSuffix(rel, ".xz") || strings.HasSuffix(rel, ".zst") || strings.HasSuffix(rel, ".gz") {
			return fmt.Errorf("compressed module %s: busybox insmod needs plain .ko", rel)
		}
		name := "kernel/" + filepath.Base(rel)
		if dirs[name] {
			continue
		}
		dirs[name] = true
		c.File("vmtest/"+name, modeFile, data)
		names = append(names, name)
	}
	c.File("vmtest/modules", modeFile, []byte(strings.Join(names, "\n")+"\n"))
	if err := c.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

func findBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("busybox not found (apt-get install busybox-static, or `make deps`)")
}

func envFile(k Kernel, cfg Config, nonce string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "NONCE=%s\n", shellQuote(nonce))
	fmt.Fprintf(&b, "KVER=%s\n", shellQuote(k.Version))
	fmt.Fprintf(&b, "MODDIR=%s\n", shellQuote(k.Modules))
	fmt.Fprintf(&b, "GUEST_MODULES=%s\n", shellQuote(strings.Join(GuestModules, " ")))
	fp := ""
	if cfg.ForwardPort != 0 {
		fp = strconv.Itoa(cfg.ForwardPort)
	}
	fmt.Fprintf(&b, "FORWARD_PORT=%s\n", shellQuote(fp))
	return b.String()
}

// jobScript is sourced by stage2: it exports cfg.Env and runs each job,
// printing "@@vmtest NONCE exit I CODE" after each.
func jobScript(cfg Config, nonce string) string {
	var b strings.Builder
	for _, e := range cfg.Env {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	if cfg.ForwardPort != 0 {
		fmt.Fprintf(&b, "export VMTEST_API_ADDR=%s\n", shellQuote("10.0.2.100:"+strconv.Itoa(cfg.ForwardPort)))
	}
	if cfg.Shell {
		b.WriteString("echo 'vmtest: root shell in the VM; `exit` powers it off (or Ctrl-a x)'\n")
		b.WriteString("cd /root 2>/dev/null || cd /\n")
		b.WriteString("/vmtest/busybox setsid /vmtest/busybox cttyhack /bin/bash -l </dev/ttyS0 >/dev/ttyS0 2>&1\n")
		return b.String()
	}
	for i, j := range cfg.Jobs {
		q := []string{shellQuote(j.Bin)}
		for _, a := range j.Args {
			q = append(q, shellQuote(a))
		}
		fmt.Fprintf(&b, "echo %s\n", shellQuote("=== vmtest: "+j.Bin+" "+strings.Join(j.Args, " ")))
		fmt.Fprintf(&b, "echo \"@@vmtest %s start %d\"\n", nonce, i)
		fmt.Fprintf(&b, "(cd %s && exec %s </dev/null)\n", shellQuote(j.Dir), strings.Join(q, " "))
		fmt.Fprintf(&b, "echo \"@@vmtest %s exit %d $?\"\n", nonce, i)
	}
	return b.String()
}

// resolveJobs makes binaries absolute and fills in working directories.
func resolveJobs(in []Job) ([]Job, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	var out []Job
	for _, j := range in {
		bin, err := filepath.Abs(j.Bin)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(bin)
		if err != nil {
			return nil, fmt.Errorf("vmtest: test binary: %w", err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("vmtest: %s is not an executable file", bin)
		}
		j.Bin = bin
		switch {
		case j.Dir != "":
			if j.Dir, err = filepath.Abs(j.Dir); err != nil {
				return nil, err
			}
		default:
			j.Dir = packageDir(bin, wd)
		}
		out = append(out, j)
	}
	return out, nil
}

// packageDir returns the source directory of a `go test -c` binary's package
// when its module's go.mod is found at or above wd; otherwise wd.
func packageDir(bin, wd string) string {
	info, err := buildinfo.ReadFile(bin)
	// A test binary's path is its package's plus ".test", but a main
	// package's (cmd/ipvs-proxy) is the package's own: `go test -c` names
	// the file NAME.test either way.
	if err != nil || !strings.HasSuffix(info.Path, ".test") && !strings.HasSuffix(bin, ".test") {
		return wd
	}
	pkg := strings.TrimSuffix(info.Path, ".test")
	mod := info.Main.Path
	rel, ok := strings.CutPrefix(pkg, mod)
	if !ok || (rel != "" && rel[0] != '/') {
		return wd
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if modulePath(filepath.Join(dir, "go.mod")) == mod {
			cand := filepath.Join(dir, filepath.FromSlash(rel))
			if st, err := os.Stat(cand); err == nil && st.IsDir() {
				return cand
			}
			return wd
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

func modulePath(gomod string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

func newNonce() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}
