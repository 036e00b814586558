//go:build kernel

package iptables_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
)

// The first Full of a started proxy, timed in the kernel: what a node costs
// from empty, after a restart of the proxy, and after kube-proxy. Each
// repetition runs in a fresh network namespace; the chains' binaries are
// counted and timed by kind (iptables-save, iptables-restore).
//
//	flock /tmp/ipvs-heavy.lock make test-kernel KERNEL_PKGS=./iptables/ \
//	    KERNEL_TEST_FLAGS='-test.run=^$ -test.bench=KernelFirstFull -test.benchtime=5x'

// callStat counts and times one kind of RuleRunner call.
type callStat struct {
	n    int
	took time.Duration
}

func (s *callStat) time(start time.Time) { s.n++; s.took += time.Since(start) }

// timedRunner is a RuleRunner that counts and times the calls of the one it
// wraps. It keeps the wrapped runner's counters (counted).
type timedRunner struct {
	iptables.RuleRunner
	save, restore *callStat
}

func (r timedRunner) Save() (string, error) {
	defer r.save.time(time.Now())
	return r.RuleRunner.Save()
}

func (r timedRunner) Restore(input string) error {
	defer r.restore.time(time.Now())
	return r.RuleRunner.Restore(input)
}

func (r timedRunner) Execs() int64    { return r.RuleRunner.(counted).Execs() }
func (r timedRunner) Restores() int64 { return r.RuleRunner.(counted).Restores() }

// firstFullStats sums the calls of every repetition.
type firstFullStats struct{ save, restore callStat }

// timed makes a's chain syncers, created from now on, count into st.
func (st *firstFullStats) timed(a *iptables.Syncer) {
	open := a.NewRunner()
	a.SetNewRunner(func(family string) (iptables.RuleRunner, error) {
		r, err := open(family)
		if err != nil {
			return nil, err
		}
		return timedRunner{RuleRunner: r, save: &st.save, restore: &st.restore}, nil
	})
}

func (st *firstFullStats) report(b *testing.B) {
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(float64(st.save.n)/n, "saves/op")
	b.ReportMetric(ms(st.save.took), "save-ms/op")
	b.ReportMetric(float64(st.restore.n)/n, "restores/op")
	b.ReportMetric(ms(st.restore.took), "restore-ms/op")
}

// benchFirstFull times, b.N times in a fresh namespace each, the first Full
// of a new Syncer of sets and rules after prepare (untimed) has set
// the namespace up.
func benchFirstFull(b *testing.B, sets []iptables.IPSet, rules []iptables.Ruleset, prepare func(b *testing.B)) {
	var st firstFullStats
	b.StopTimer()
	for range b.N {
		inNetns(b, func() {
			prepare(b)
			a, err := kernel.NewSyncer(nil)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			st.timed(a)
			b.StartTimer()
			err = syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules}))
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
		})
	}
	st.report(b)
}

// BenchmarkKernelFirstFull: the first Full of a proxy started on a node
// with nothing of it (fresh), on a node its predecessor synced (restart:
// a DaemonSet update), and on a node kube-proxy's IPVS mode left
// (takeover, testdata/kube-proxy-1.34).
func BenchmarkKernelFirstFull(b *testing.B) {
	sets, rules := dualStackPlan()
	b.Run("fresh", func(b *testing.B) { benchFirstFull(b, sets, rules, func(*testing.B) {}) })
	b.Run("restart", func(b *testing.B) {
		benchFirstFull(b, sets, rules, func(b *testing.B) {
			a, err := kernel.NewSyncer(nil)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("takeover", func(b *testing.B) {
		sets, rules := kubeProxyPlan(b)
		benchFirstFull(b, sets, rules, func(b *testing.B) { loadKubeProxyKernel(b) })
	})
}

// The first Full of a node runs three binaries per family, whatever the
// number of tables: iptables-save, one iptables-restore of every table
// that differs, iptables-save to learn what it wrote. The next runs one.
func TestKernelFirstFullExecs(t *testing.T) {
	inNetns(t, func() {
		a := newKernelSyncer(t)
		sets, rules := dualStackPlan()
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		if n := execCount(a); n != 6 {
			t.Errorf("first Full ran %d binaries, want 6 (save, restore, save per family)", n)
		}
		checkKernel(t, sets, rules)
	})
}

// A proxy killed between the iptables-restore that inserted its jumps and
// the save that records them, and started again beside another insert,
// finds a jump twice: its first Full keeps one, at the head of the chain,
// leaves others' rules, and the Full after it writes nothing.
func TestKernelRestartRemovesDuplicateJumps(t *testing.T) {
	inNetns(t, func() {
		sets, rules := dualStackPlan()
		a, err := kernel.NewSyncer(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		a.Close()
		run(t, "iptables", "-t", "nat", "-N", "DOCKER")
		run(t, "iptables", "-t", "nat", "-I", "PREROUTING", "1", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "DOCKER")
		run(t, "iptables", "-t", "nat", "-I", "PREROUTING", "1", "-m", "comment", "--comment", "kubernetes service portals", "-j", iptables.ChainServices)
		b := newKernelSyncer(t)
		if err := syncErr(b.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		checkKernel(t, sets, rules)
		want := []string{`-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`, "-m addrtype --dst-type LOCAL -j DOCKER"}
		if got := iptables.ParseSaveAll(run(t, "iptables-save", "-t", "nat"))["nat"]["PREROUTING"]; !slices.Equal(got, want) {
			t.Errorf("PREROUTING = %q, want %q", got, want)
		}
		before := execCount(b)
		if err := syncErr(b.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		if n := execCount(b) - before; n != 2 {
			t.Errorf("the Full after ran %d binaries, want the 2 saves", n)
		}
	})
}
