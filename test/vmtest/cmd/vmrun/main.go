// Command vmrun runs Go test binaries as root inside a qemu VM booted with
// Debian's kernel (IPVS, dummy, veth, netfilter modules available):
//
//	vmrun [flags] -- BIN [ARGS...] [::: [-C DIR] BIN [ARGS...]]...
//	vmrun -shell [flags]
//
// Binaries separated by ":::" run one after the other in a single boot. Each
// runs in its package's source directory (like `go test`) unless the group
// starts with "-C DIR". vmrun exits 0 only when the VM booted, IPVS loaded
// and every binary exited 0; otherwise it prints why and exits 1 (2 for usage).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, ",") }
func (e *envFlag) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	var (
		cfg  vmtest.Config
		env  envFlag
		quit bool
	)
	flag.IntVar(&cfg.ForwardPort, "forward-port", 0, "let the guest reach host 127.0.0.1:`PORT` at 10.0.2.100:PORT (exported to tests as VMTEST_API_ADDR)")
	flag.Var(&env, "env", "export `KEY=VAL` to the test binaries (repeatable)")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "bound for the whole run, boot included")
	flag.IntVar(&cfg.CPUs, "cpus", 2, "guest vCPUs")
	flag.IntVar(&cfg.MemoryMiB, "mem", 3072, "guest memory in MiB")
	flag.StringVar(&cfg.KernelRoot, "kernel-root", "", "unpacked linux-image dir (default $"+vmtest.KernelRootEnv+" or .cache/vm/root above the working dir)")
	flag.BoolVar(&cfg.Shell, "shell", false, "interactive root shell in the VM instead of tests (Ctrl-a x quits)")
	flag.BoolVar(&cfg.KernelMessages, "kernel-messages", false, "show kernel info messages on the console")
	flag.BoolVar(&cfg.FailOnSkip, "fail-on-skip", false, "fail when a test prints \"--- SKIP\" (pass -test.v to the binaries)")
	flag.BoolVar(&quit, "q", false, "do not print the timing summary")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: vmrun [flags] -- BIN [ARGS...] [::: [-C DIR] BIN [ARGS...]]...\n       vmrun -shell [flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	cfg.Env = env
	jobs, err := parseJobs(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmrun:", err)
		flag.Usage()
		os.Exit(2)
	}
	cfg.Jobs = jobs
	if !cfg.Shell && len(jobs) == 0 {
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := vmtest.Run(ctx, cfg)
	if res != nil && !quit && !cfg.Shell {
		fmt.Fprintf(os.Stderr, "\nvmrun: boot %.1fs, total %.1fs\n", res.Boot.Seconds(), res.Total.Seconds())
		for _, j := range res.Jobs {
			status := "ok"
			if j.ExitCode != 0 {
				status = fmt.Sprintf("FAIL (exit %d)", j.ExitCode)
			}
			fmt.Fprintf(os.Stderr, "vmrun: %-4s %6.1fs %s\n", status, j.Duration.Seconds(), j.Job.Bin)
		}
		for _, s := range res.Skipped {
			fmt.Fprintf(os.Stderr, "vmrun: SKIP %s\n", s)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmrun: FAIL:", err)
		if errors.Is(err, vmtest.ErrNoKernel) {
			fmt.Fprintln(os.Stderr, "vmrun: hint: `make deps` downloads and unpacks the kernel into .cache/vm")
		}
		os.Exit(1)
	}
}

// parseJobs splits "BIN ARGS ::: -C DIR BIN ARGS" into jobs.
func parseJobs(args []string) ([]vmtest.Job, error) {
	var jobs []vmtest.Job
	var group []string
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		var j vmtest.Job
		if group[0] == "-C" {
			if len(group) < 3 {
				return errors.New("-C needs a directory and a binary")
			}
			j.Dir, group = group[1], group[2:]
		}
		j.Bin, j.Args = group[0], group[1:]
		jobs = append(jobs, j)
		group = nil
		return nil
	}
	for _, a := range args {
		if a == ":::" {
			if len(group) == 0 {
				return nil, errors.New("empty group before :::")
			}
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		group = append(group, a)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return jobs, nil
}
