package ktest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a program started in a namespace by NS.Start, its standard
// output and error in a log file: how the end-to-end tests run
// `ipvs-proxy run` and kube-proxy in a node namespace.
type Process struct {
	// Cmd is the command; Cmd.Process.Pid is the program's own pid, as
	// `ip netns exec` execs it without forking.
	Cmd *exec.Cmd
	// Log is the path of the file holding its output.
	Log string
	// Started is when it was started.
	Started time.Time

	done chan struct{}
	err  error
}

// Start runs `ip netns exec NAME prog args...` with its output to the file
// log (created). When the test ends, the program is killed if it still
// runs and, if the test failed, the last 60 lines of its output are logged.
func (ns *NS) Start(t testing.TB, log, prog string, args ...string) *Process {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: exec.Command("ip", append([]string{"netns", "exec", ns.Name, prog}, args...)...),
		Log: log, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = f, f
	p.Started = time.Now()
	if err := p.Cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s in %s: %v", prog, ns.Name, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.Alive() {
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s in %s, output %s (last lines):\n%s", prog, ns.Name, log, p.Tail(60))
		}
	})
	return p
}

// Done is closed when the program has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Alive reports whether the program still runs.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Wait waits up to d for the program to exit; it reports whether it did,
// and its exit error.
func (p *Process) Wait(d time.Duration) (exited bool, err error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(d):
		return false, nil
	}
}

// Stop sends SIGTERM and waits up to timeout for the exit: how long that
// took, and the exit error (an error too when it did not exit).
func (p *Process) Stop(timeout time.Duration) (time.Duration, error) {
	return p.signal(syscall.SIGTERM, timeout)
}

// Kill sends SIGKILL and reaps the program; an error if it did not die
// within timeout.
func (p *Process) Kill(timeout time.Duration) error {
	_, err := p.signal(syscall.SIGKILL, timeout)
	if err != nil && !p.Alive() {
		return nil // killed: the exit error says "signal: killed"
	}
	return err
}

func (p *Process) signal(sig syscall.Signal, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := p.Cmd.Process.Signal(sig); err != nil && p.Alive() {
		return 0, fmt.Errorf("signal %v to pid %d: %w", sig, p.Cmd.Process.Pid, err)
	}
	exited, err := p.Wait(timeout)
	if !exited {
		return time.Since(start), fmt.Errorf("pid %d still running %v after %v", p.Cmd.Process.Pid, timeout, sig)
	}
	return time.Since(start), err
}

// Output is everything the program wrote so far.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// OutputHas reports whether the program's output holds s.
func (p *Process) OutputHas(s string) bool { return strings.Contains(p.Output(), s) }

// Tail is the last n lines of the program's output.
func (p *Process) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
