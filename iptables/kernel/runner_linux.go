package kernel

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"

	goiptables "github.com/coreos/go-iptables/iptables"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// Runner runs one family's iptables binaries. go-iptables picks the
// `iptables` (`ip6tables`) binary on PATH and so the backend the host uses
// (nf_tables or legacy); iptables-save and iptables-restore are taken from
// the same alternatives, so both always speak to the same backend.
type Runner struct {
	ipt     *goiptables.IPTables
	save    string
	restore string
	// execs counts every binary run, for tests and benchmarks.
	execs atomic.Int64
	// restores counts iptables-restore runs (writes).
	restores atomic.Int64
}

// NewRunner finds the iptables, iptables-save and iptables-restore binaries of
// family (ip6tables... for inet6) on PATH.
func NewRunner(family string) (*Runner, error) {
	proto, prefix := goiptables.ProtocolIPv4, "iptables"
	if family == "inet6" {
		proto, prefix = goiptables.ProtocolIPv6, "ip6tables"
	}
	ipt, err := goiptables.New(goiptables.IPFamily(proto), goiptables.Timeout(5))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	r := &Runner{ipt: ipt}
	r.execs.Add(1) // go-iptables ran `iptables --version`
	if r.save, err = exec.LookPath(prefix + "-save"); err != nil {
		return nil, fmt.Errorf("%s-save: %w", prefix, err)
	}
	if r.restore, err = exec.LookPath(prefix + "-restore"); err != nil {
		return nil, fmt.Errorf("%s-restore: %w", prefix, err)
	}
	return r, nil
}

// Save implements iptables.RuleRunner.
func (r *Runner) Save(table string) (string, error) {
	r.execs.Add(1)
	var out, errb bytes.Buffer
	cmd := exec.Command(r.save, "-t", table)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s -t %s: %w: %w: %s", r.save, table, iptables.ErrKernel, err, strings.TrimSpace(errb.String()))
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

// Exists implements iptables.RuleRunner.
func (r *Runner) Exists(table, chain string, rule iptables.Rule) (bool, error) {
	r.execs.Add(1)
	ok, err := r.ipt.Exists(table, chain, rule...)
	if err != nil {
		return false, fmt.Errorf("iptables -t %s -C %s %s: %w: %w", table, chain, iptables.RuleText(rule), iptables.ErrKernel, err)
	}
	return ok, nil
}

// Execs counts the binaries it ran, for tests and benchmarks.
func (r *Runner) Execs() int64 { return r.execs.Load() }

// Restores counts its iptables-restore runs (writes).
func (r *Runner) Restores() int64 { return r.restores.Load() }
