//go:build kernel

package node_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		down := false
		for _, d := range deps {
			down = down || !d.running()
		}
		if down || time.Now().After(deadline) {
			var b strings.Builder
			for _, d := range deps {
				b.WriteString(d.tail(40) + "\n")
			}
			t.Fatalf("%s: not within %v (last error: %v)\n%s", what, timeout, last, b.String())
		}
		time.Sleep(interval)
	}
}
