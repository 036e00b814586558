//go:build kernel

package node_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
)

// daemon is a long-running program of the node (containerd, the kubelet),
// its output in a file that a failure prints the end of.
type daemon struct {
	name, log string
	cmd       *exec.Cmd
	exited    chan struct{}
	err       error
}

// startDaemon starts argv with output to dir/NAME.log; the test's cleanup
// sends it SIGTERM and waits up to 10 s.
func startDaemon(t *testing.T, dir, name string, argv ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	f, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { d.err = d.cmd.Wait(); _ = f.Close(); close(d.exited) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
		}
	})
	return d
}

// running reports whether the daemon has not exited.
func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// tail is the last n lines of the daemon's output, and how it exited.
func (d *daemon) tail(n int) string {
	b, _ := os.ReadFile(d.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	state := "running"
	if !d.running() {
		state = fmt.Sprintf("exited: %v", d.err)
	}
	return fmt.Sprintf("%s (%s), last %d lines of %s:\n%s", d.name, state, len(lines), d.log, strings.Join(lines, "\n"))
}

// waitFor polls cond every interval until it returns true, the daemons it
// depends on exit, or timeout; it fails the test with what and each
// daemon's output then.
func waitFor(t *testing.T, what string, timeout, interval time.Duration, cond func() (bool, error), deps ...*daemon) {
	t.Helper()
	defer func() {
		if t.Failed() {
			for _, d := range deps {
				t.Log(d.tail(40))
			}
		}
	}()
	last := errNotYet
	harness.WaitFor(t, what, timeout, interval, func() error {
		if ok, err := cond(); ok {
			return nil
		} else if err != nil {
			last = err
		}
		for _, d := range deps {
			if !d.running() {
				return fmt.Errorf("%w: %s exited: %v", harness.ErrGiveUp, d.name, d.err)
			}
		}
		return last
	})
}

// errNotYet is cond's error when it neither holds nor fails.
var errNotYet = errors.New("not yet")
