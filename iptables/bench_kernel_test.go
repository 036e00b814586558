//go:build kernel

package iptables_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
)

const (
	benchServices  = 10000
	benchEndpoints = 10
)

// benchSets is the ipset content of benchServices ClusterIP services with
// benchEndpoints endpoints each, one in ten also a NodePort, as the planner
// lays it out: KUBE-CLUSTER-IP and KUBE-IPVS-IPS one entry per service,
// KUBE-LOOP-BACK one per endpoint, KUBE-NODE-PORT-TCP one per NodePort, and
// every other set empty. 10,000 × 10 gives 121,000 entries in 17 sets.
func benchSets() []iptables.IPSet { return benchSetsOf(benchServices) }

// benchSetsOf is benchSets for n services.
func benchSetsOf(n int) []iptables.IPSet {
	sets := iptables.EmptySets(iptables.FamilyIPv4)
	var cluster, ips, loop, nodePorts []iptables.Entry
	for s := range n {
		vip := netip.AddrFrom4([4]byte{10, 96, byte(s >> 8), byte(s)})
		cluster = append(cluster, iptables.Entry{IP: vip, Protocol: model.TCP, Port: 80})
		ips = append(ips, iptables.Entry{IP: vip})
		for e := range benchEndpoints {
			n := s*benchEndpoints + e
			ep := netip.AddrFrom4([4]byte{10, byte(128 + n>>16), byte(n >> 8), byte(n)})
			loop = append(loop, iptables.Entry{IP: ep, Protocol: model.TCP, Port: 8080, Net: netip.PrefixFrom(ep, 32)})
		}
		if s%10 == 0 {
			nodePorts = append(nodePorts, iptables.Entry{Port: uint16(30000 + s/10)})
		}
	}
	for i := range sets {
		switch sets[i].Name {
		case iptables.SetClusterIP:
			sets[i].Entries = cluster
		case iptables.SetIPVSIPs:
			sets[i].Entries = ips
		case iptables.SetLoopBack:
			sets[i].Entries = loop
		case iptables.SetNodePortTCP:
			sets[i].Entries = nodePorts
		}
	}
	return sets
}

// restoreInput is the same content as `ipset restore` input.
func restoreInput(sets []iptables.IPSet) []byte {
	var b bytes.Buffer
	for _, s := range sets {
		b.Write(iptables.AppendCreate(nil, &s))
		b.WriteByte('\n')
		for _, e := range s.Entries {
			b.WriteString("add " + s.Name + " ")
			b.Write(iptables.AppendEntry(nil, s.Type, e))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func countEntries(sets []iptables.IPSet) int {
	n := 0
	for _, s := range sets {
		n += len(s.Entries)
	}
	return n
}

// BenchmarkKernelIPSetFull: Syncer.Full of the sets from empty, one fresh
// network namespace per repetition.
func BenchmarkKernelIPSetFull(b *testing.B) {
	sets := benchSets()
	b.ReportMetric(float64(countEntries(sets)), "entries")
	b.StopTimer()
	for range b.N {
		inNetns(b, func() {
			a, err := kernel.NewSyncer(nil)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			b.StartTimer()
			err = syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil}))
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkKernelIPSetRestore: `ipset restore` of the same content, one fresh
// network namespace per repetition: the floor.
func BenchmarkKernelIPSetRestore(b *testing.B) {
	in := restoreInput(benchSets())
	b.StopTimer()
	for range b.N {
		inNetns(b, func() {
			cmd := exec.Command("ipset", "restore")
			cmd.Stdin = bytes.NewReader(in)
			b.StartTimer()
			out, err := cmd.CombinedOutput()
			b.StopTimer()
			if err != nil {
				b.Fatalf("ipset restore: %v: %s", err, out)
			}
		})
	}
}

// BenchmarkKernelIPSetPartialOne: one endpoint changed among the 10,000
// services (one KUBE-LOOP-BACK entry out, one in), after a Full; the time of
// Partial including its in-memory diff of all sets.
func BenchmarkKernelIPSetPartialOne(b *testing.B) {
	inNetns(b, func() {
		a, err := kernel.NewSyncer(nil)
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		base := benchSets()
		if err := syncErr(a.Full(iptables.Desired{Sets: base, Rules: nil})); err != nil {
			b.Fatal(err)
		}
		changed := benchSets()
		loop := findSet(changed, iptables.SetLoopBack)
		ep := mustAddr("10.255.0.1")
		loop.Entries[4242] = iptables.Entry{IP: ep, Protocol: model.TCP, Port: 8080, Net: netip.PrefixFrom(ep, 32)}
		loop.Entries = iptables.SortEntries(loop.Entries) // the planner's slices are sorted
		b.ResetTimer()
		for i := range b.N {
			want := changed
			if i%2 == 1 {
				want = base
			}
			if err := syncErr(a.Partial(iptables.Desired{Sets: want, Rules: nil})); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		// The kernel holds the last state.
		last := changed
		if b.N%2 == 0 {
			last = base
		}
		if got, want := ipsetSave(b, setNames(last)), planSave(last); got != want {
			b.Fatalf("kernel differs from the plan after %d partial syncs", b.N)
		}
	})
}

// TestKernelIPSetBenchContent checks that the benchmark's Full and restore
// produce the same kernel state, so the two timings compare like with like.
func TestKernelIPSetBenchContent(t *testing.T) {
	// The content check needs the shape, not the size: 100 services (1,210
	// entries) rather than the benchmarks' 10,000: `ipset restore` and
	// `ipset save` cost milliseconds per entry under TCG
	// (BenchmarkKernelIPSetRestore).
	sets := benchSetsOf(100)
	var viaFull, viaRestore string
	var dFull, dRestore time.Duration
	inNetns(t, func() {
		a, err := kernel.NewSyncer(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		start := time.Now()
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
			t.Fatal(err)
		}
		dFull = time.Since(start)
		if a.SetFallbacks() != 0 {
			t.Errorf("%d batches were refused and retried entry by entry", a.SetFallbacks())
		}
		viaFull = ipsetSave(t, setNames(sets))
	})
	inNetns(t, func() {
		cmd := exec.Command("ipset", "restore")
		cmd.Stdin = bytes.NewReader(restoreInput(sets))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ipset restore: %v: %s", err, out)
		}
		dRestore = time.Since(start)
		viaRestore = ipsetSave(t, setNames(sets))
	})
	if viaFull != viaRestore {
		t.Fatalf("Full and ipset restore differ (%d vs %d bytes)", len(viaFull), len(viaRestore))
	}
	if want := planSave(sets); viaFull != want {
		t.Fatalf("kernel differs from the plan (%d vs %d bytes)", len(viaFull), len(want))
	}
	t.Logf("%d entries: Full %v, ipset restore %v (%s)", countEntries(sets), dFull, dRestore, fmt.Sprintf("%.2f×", float64(dFull)/float64(dRestore)))
}
