package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// scaleNodePortEvery: one service in this many also has a NodePort.
const scaleNodePortEvery = 4

// fillScale puts n services of m endpoints each into src, as the daemon
// benchmark's objects: one TCP port, a ClusterIP, one in scaleNodePortEvery
// with a NodePort (up to 2,700 of them: the default range holds 2,768), endpoints spread over 50 nodes (n1, this node, holds
// one in 50).
func fillScale(src *fakeSource, n, m int) {
	for s := range n {
		key := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%05d", s)}
		sp := model.ServicePort{Name: model.ServicePortName{NamespacedName: key, Port: "http"}, Protocol: model.TCP, Port: 80,
			ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(s >> 8), byte(s)})}}
		if s%scaleNodePortEvery == 0 && s/scaleNodePortEvery < 2700 {
			sp.NodePort = uint16(30000 + s/scaleNodePortEvery)
		}
		es := make([]model.Endpoint, m)
		for e := range m {
			k := s*m + e
			es[e] = model.Endpoint{Address: netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)}), Port: 8080,
				NodeName: fmt.Sprintf("n%d", k%50+1), Ready: true, Serving: true}
		}
		src.svcs[key], src.eps[key] = sp, es
	}
}

// newScaleLoop is a loop over the in-memory fakes (ipvstest.FakeTable,
// addrmgrtest.FakeLink, iptablestest.FakeSets and FakeRunner) and a source of n
// services × 10 endpoints (fillScale), with the last sync's report at
// *last.
func newScaleLoop(b *testing.B, n int) (l *Loop, src *fakeSource, link *addrmgrtest.FakeLink, last *SyncReport) {
	link = addrmgrtest.NewFakeLink()
	l, src, last = newScaleLoopOn(b, n, scaleNode{ipvstest.NewFakeTable(), link, iptablestest.NewFakeSets()})
	return l, src, link, last
}

// scaleNode is the fake kernel of a scale benchmark's node, which a second
// loop can find as the first left it (a restart).
type scaleNode struct {
	table *ipvstest.FakeTable
	link  *addrmgrtest.FakeLink
	sets  *iptablestest.FakeSets
}

func newScaleLoopOn(b testing.TB, n int, node scaleNode) (l *Loop, src *fakeSource, last *SyncReport) {
	mgr := addrmgr.NewManager(node.link, guard.New(guard.Inputs{LocalAddrs: testOpts.LocalAddrs}), nil)
	if err := mgr.Watch(b.Context(), nil); err != nil {
		b.Fatal(err)
	}
	rules := iptables.NewSyncer(node.sets, func(string) (iptables.RuleRunner, error) { return iptablestest.NewFakeRunner(), nil }, nil)
	// The ipsets read beside the loop, as run reads them (a second socket).
	rules.Reader = node.sets
	app := applier.New(ipvs.NewReconciler(node.table, ipvs.Options{}), mgr, rules, nil)
	return newScaleLoopOver(b, n, &kernel{app: app})
}

// newScaleLoopOver is a loop over app (newScaleLoopOn's fakes, or the
// kernel of a node namespace) and a source of n services × 10 endpoints
// (fillScale), with the last sync's report at *last.
func newScaleLoopOver(b testing.TB, n int, app Applier) (l *Loop, src *fakeSource, last *SyncReport) {
	src = newFakeSource()
	fillScale(src, n, 10)
	l = &Loop{Source: src, Applier: app, Options: testOpts, Metrics: metrics.New(), SyncPeriod: time.Hour}
	l.defaults()
	last = new(SyncReport)
	l.Observe = func(rep SyncReport, _ Stats) { *last = rep }
	return l, src, last
}

// BenchmarkPartialSyncScale is one partial sync of the whole loop — the
// changes taken, the changed Service read from the source and planned
// again, the state patched, the applier's journal, IPVS, ipsets, iptables
// and binds, the metrics — for one changed endpoint (on another node) of
// one Service among n services × 10 endpoints, at 1,000 to 20,000
// services. The kernel is the in-memory fakes (ipvstest.FakeTable,
// addrmgrtest.FakeLink, iptablestest.FakeSets and FakeRunner): what it measures is
// the proxy's own work per change, which should not grow with n.
//
//	go test -run '^$' -bench BenchmarkPartialSyncScale -benchtime 2000x -count 5 ./internal/drive/daemon/
func BenchmarkPartialSyncScale(b *testing.B) {
	for _, n := range []int{1000, 3000, 10000, 20000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			l, src, link, last := newScaleLoop(b, n)
			l.needFull = true
			l.syncOnce()
			if last.Err != nil || !last.Full {
				b.Fatalf("first full sync: %+v", *last)
			}
			changed := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%05d", n/2)}
			eps := src.eps[changed]
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				i++
				src.mu.Lock()
				moved := eps[1]
				moved.Address = netip.AddrFrom4([4]byte{10, 255, byte(i >> 8), byte(i)})
				src.eps[changed] = append([]model.Endpoint{eps[0], moved}, eps[2:]...)
				src.dirty[changed] = true
				src.mu.Unlock()
				link.Flush()
				l.syncOnce()
				if last.Err != nil || last.Full || len(last.Services) != 1 {
					b.Fatalf("partial sync %d: %+v", i, *last)
				}
			}
		})
	}
}

// BenchmarkFullSyncScale is one periodic full sync of the whole loop (no
// change waiting: the sync period's) among n services × 10 endpoints, over
// the in-memory fakes: what the proxy itself spends every --sync-period,
// split into planning and applying (plan-ms, apply-ms per op), beside the
// kernel's reads, which the fakes do not cost.
//
//	go test -run '^$' -bench BenchmarkFullSyncScale -benchtime 5x -count 3 -benchmem ./internal/drive/daemon/
func BenchmarkFullSyncScale(b *testing.B) {
	for _, n := range []int{1000, 10000, 20000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			l, _, _, last := newScaleLoop(b, n)
			var plan, apply time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				l.needFull = true
				l.syncOnce()
				if last.Err != nil || !last.Full {
					b.Fatalf("full sync %d: %+v", i, *last)
				}
				plan += last.Stages.Plan
				apply += last.Stages.Apply
			}
			b.ReportMetric(float64(plan.Milliseconds())/float64(b.N), "plan-ms/op")
			b.ReportMetric(float64(apply.Milliseconds())/float64(b.N), "apply-ms/op")
		})
	}
}

// BenchmarkReadbackFullSyncScale is BenchmarkFullSyncScale's periodic full
// sync as run does it: the kernel and the node read beside the loop
// (Readbacker), untimed, then the full sync from what they read, timed:
// what a change arriving meanwhile waits for.
//
//	go test -run '^$' -bench BenchmarkReadbackFullSyncScale -benchtime 5x -count 3 -benchmem ./internal/drive/daemon/
//
// adopted=true is the same after a restart: a second loop's first full
// sync adopted what the first one programmed, from a dump that lists each
// virtual server's real servers newest first, as the kernel does.
func BenchmarkReadbackFullSyncScale(b *testing.B) {
	for _, n := range []int{1000, 10000, 20000} {
		for _, adopted := range []bool{false, true} {
			b.Run(fmt.Sprintf("services=%d/adopted=%t", n, adopted), func(b *testing.B) {
				benchReadbackFullSync(b, n, adopted)
			})
		}
	}
}

func benchReadbackFullSync(b *testing.B, n int, adopted bool) {
	node := scaleNode{ipvstest.NewFakeTable(), addrmgrtest.NewFakeLink(), iptablestest.NewFakeSets()}
	l, _, last := newScaleLoopOn(b, n, node)
	l.needFull = true
	l.syncOnce()
	if adopted {
		// The restart: a new loop over the node the first one programmed.
		before := node.table.String()
		l, _, last = newScaleLoopOn(b, n, node)
		l.needFull = true
		if l.syncOnce(); last.Err != nil || node.table.String() != before {
			b.Fatalf("the adopting full sync failed or changed the table: %v", last.Err)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		readBeside(b, l)
		b.StartTimer()
		l.syncOnce()
		if last.Err != nil || !last.Full || l.read != nil {
			b.Fatalf("full sync %d from the read: %+v", i, *last)
		}
	}
}

// BenchmarkBeginFullScale is what starting a periodic full sync's read
// holds the loop for (Readbacker.BeginFull on the loop's goroutine: the
// layers start recording their writes and hand the read the mirrors'
// digests), at 10,000 and 20,000 services × 10 endpoints; the read itself
// runs beside the loop, untimed.
//
//	go test -run '^$' -bench BenchmarkBeginFullScale -benchtime 20x -count 3 -benchmem ./internal/drive/daemon/
func BenchmarkBeginFullScale(b *testing.B) {
	for _, n := range []int{10000, 20000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			l, _, _, last := newScaleLoop(b, n)
			l.needFull = true
			if l.syncOnce(); last.Err != nil {
				b.Fatal(last.Err)
			}
			rba := l.Applier.(Readbacker)
			b.ReportAllocs()
			for b.Loop() {
				read := rba.BeginFull()
				b.StopTimer()
				if _, err := read(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkChangeDuringFullSync is how long a change that arrives as a
// periodic full sync from its read begins waits for its turn (the full
// sync in turns, turn.go), against how long that full sync holds the loop
// in all, among 10,000 and 20,000 services × 10 endpoints over the fakes:
// waited-ms runs from the full sync's start to the end of the change's
// partial sync, held-ms to the end of the full sync. Without turns a
// change waits the whole hold.
//
//	go test -run '^$' -bench BenchmarkChangeDuringFullSync -benchtime 20x -count 3 ./internal/drive/daemon/
func BenchmarkChangeDuringFullSync(b *testing.B) {
	for _, n := range []int{10000, 20000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			l, src, _, _ := newScaleLoop(b, n)
			l.needFull = true
			l.syncOnce()
			changed := svcKey(n / 2)
			var start, turned time.Time
			var turns int
			l.Observe = func(rep SyncReport, _ Stats) {
				if !rep.Full {
					turned = time.Now()
					turns++
				}
			}
			var waited, held time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				readBeside(b, l)
				src.onPending = func() {
					src.mu.Lock()
					eps := slices.Clone(src.eps[changed])
					eps[0].Address = netip.AddrFrom4([4]byte{10, 251, byte(i >> 8), byte(i)})
					src.eps[changed] = eps
					src.dirty[changed] = true
					src.mu.Unlock()
				}
				b.StartTimer()
				start = time.Now()
				l.syncOnce()
				held += time.Since(start)
				waited += turned.Sub(start)
			}
			if turns != b.N {
				b.Fatalf("%d turns in %d full syncs", turns, b.N)
			}
			b.ReportMetric(float64(waited.Microseconds())/1000/float64(b.N), "waited-ms")
			b.ReportMetric(float64(held.Microseconds())/1000/float64(b.N), "held-ms")
		})
	}
}

// readBeside runs a periodic full sync's read beside the loop at once, and
// makes the full sync from it due.
func readBeside(tb testing.TB, l *Loop) {
	tb.Helper()
	if err := beginFullFromRead(l); err != nil {
		tb.Fatal(err)
	}
}

// beginFullFromRead is readBeside returning its error, for a caller that
// must not fail the test where it runs (in a node namespace's ktest.Do).
func beginFullFromRead(l *Loop) error {
	rb, err := l.Applier.(Readbacker).BeginFull()()
	if err != nil {
		return fmt.Errorf("the periodic full sync's read: %w", err)
	}
	l.read, l.needFull = &readResult{rb: rb}, true
	return nil
}
