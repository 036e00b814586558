// Package guest runs the VM half of an end-to-end package: the package's
// guest test (its *_kernel_test.go files, built with the kernel tag by
// gobuild) once in the test VM, with the environment and the forwarded API
// server port the host half prepared. It owns that one vmtest run; the
// host half owns the API server, the objects and what the guest reads.
package guest

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// Suite is one guest test run.
type Suite struct {
	// Test is the guest test's name; the run is -test.run ^Test$, or
	// ^Test$/Sub when Sub is set.
	Test, Sub string
	// Args are more flags for the test binary (for example -test.skip).
	Args []string
	// Bin is a prebuilt guest test binary; empty: built into dir from the
	// package in the working directory, with BuildFlags.
	Bin        string
	BuildFlags []string
	// Timeout is the guest test's -test.timeout; the VM gets two minutes
	// more to boot and power down.
	Timeout time.Duration
	// Env is KEY=VALUE for the guest (vmtest.GuestEnv reads it).
	Env []string
	// Port is forwarded to the guest (the API server's; 0: none).
	Port int
	// HostForwards let the host reach guest ports (a kubelet's API for
	// the API server); they need Port.
	HostForwards []vmtest.HostForward
	// AllowSkip lets the guest test skip; by default a skip fails the run,
	// as a guest test that skipped did not test anything.
	AllowSkip bool
	// CPUs is the VM's vCPU count (vmtest.Config.CPUs; 0: its default).
	CPUs int
	// Output receives the guest's console as well as os.Stdout (nil: only
	// os.Stdout); a test keeps it to find what the guest printed there,
	// such as profiles (package consoleprof).
	Output io.Writer
}

// Run builds the guest test unless s.Bin is set, boots the VM, runs it
// and fails t when it fails; it logs the boot and total times.
func Run(ctx context.Context, t *testing.T, dir string, s Suite) *vmtest.Result {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := s.Bin
	if bin == "" {
		bin = gobuild.GuestTest(t, dir, s.Test, s.BuildFlags...)
	}
	run := "^" + s.Test + "$"
	if s.Sub != "" {
		run += "/" + s.Sub
	}
	args := append([]string{"-test.v", "-test.run", run, "-test.timeout", s.Timeout.String()}, s.Args...)
	var out io.Writer = os.Stdout
	if s.Output != nil {
		out = io.MultiWriter(os.Stdout, s.Output)
	}
	res, err := vmtest.Run(ctx, vmtest.Config{
		Output:       out,
		Jobs:         []vmtest.Job{{Bin: bin, Args: args, Dir: wd}},
		Env:          s.Env,
		ForwardPort:  s.Port,
		HostForwards: s.HostForwards,
		CPUs:         s.CPUs,
		Timeout:      s.Timeout + 2*time.Minute,
		FailOnSkip:   !s.AllowSkip,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM boot %v, total %v", res.Boot, res.Total)
	return res
}
