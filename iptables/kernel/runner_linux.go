package kernel

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// Runner runs one family's iptables-save and iptables-restore, as found on
// PATH: the alternatives the host's `iptables` uses, so the backend the
// host uses (nf_tables or legacy). It runs no other binary, and none until
// the chain syncer asks.
type Runner struct {
	save    string
	restore string
	// execs counts every binary run, for tests and benchmarks.
	execs atomic.Int64
	// restores counts iptables-restore runs (writes).
	restores atomic.Int64
}

// NewRunner finds the iptables-save and iptables-restore binaries of family
// (ip6tables-save, ip6tables-restore for inet6) on PATH.
func NewRunner(family string) (*Runner, error) {
	prefix := "iptables"
	if family == iptables.FamilyIPv6 {
		prefix = "ip6tables"
	}
	r := &Runner{}
	var err error
	if r.save, err = exec.LookPath(prefix + "-save"); err != nil {
		return nil, fmt.Errorf("%s-save: %w", prefix, err)
	}
	if r.restore, err = exec.LookPath(prefix + "-restore"); err != nil {
		return nil, fmt.Errorf("%s-restore: %w", prefix, err)
	}
	return r, nil
}

// Save implements iptables.RuleRunner: `iptables-save`, every table.
func (r *Runner) Save() (string, error) {
	r.execs.Add(1)
	var out, errb bytes.Buffer
	cmd := exec.Command(r.save)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: %w: %s", r.save, iptables.ErrKernel, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Restore implements iptables.RuleRunner.
func (r *Runner) Restore(input string) error {
	r.execs.Add(1)
	r.restores.Add(1)
	var errb bytes.Buffer
	cmd := exec.Command(r.restore, "-w", "5", "--noflush")
	cmd.Stdin, cmd.Stderr = strings.NewReader(input), &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s --noflush: %w: %w: %s", r.restore, iptables.ErrKernel, err, strings.TrimSpace(errb.String()))
	}
	return nil
}

// Execs counts the binaries it ran, for tests and benchmarks.
func (r *Runner) Execs() int64 { return r.execs.Load() }

// Restores counts its iptables-restore runs (writes).
func (r *Runner) Restores() int64 { return r.restores.Load() }
