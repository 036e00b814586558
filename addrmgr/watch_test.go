package addrmgr_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// watched is a manager of a FakeLink, watching it, after its first dump.
type watched struct {
	t     *testing.T
	link  *addrmgrtest.FakeLink
	m     *addrmgr.Manager
	kicks atomic.Int32
}

func newWatched(t *testing.T, guard addrmgr.Protector, ps ...netip.Prefix) *watched {
	t.Helper()
	w := &watched{t: t, link: addrmgrtest.NewFakeLink(ps...)}
	w.m = addrmgr.NewManager(w.link, guard, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.m.Watch(ctx, func() { w.kicks.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if !w.m.Watching() {
		t.Fatal("not watching after Watch")
	}
	w.refresh(true)
	w.link.Flush()
	w.kicks.Store(0)
	return w
}

// refresh runs Refresh after every notification so far was delivered and
// checks whether it dumped.
func (w *watched) refresh(wantDump bool) {
	w.t.Helper()
	w.link.Flush()
	before := w.link.Dumps
	dumped, err := w.m.Refresh()
	if err != nil {
		w.t.Fatal(err)
	}
	if dumped != wantDump || w.link.Dumps != before+btoi(wantDump) {
		w.t.Fatalf("Refresh dumped %v (%d dumps), want %v", dumped, w.link.Dumps-before, wantDump)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func vips(n int) []netip.Prefix {
	out := make([]netip.Prefix, n)
	for i := range out {
		out[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), 32)
	}
	return out
}

// The manager's own binds and unbinds never make a sync dump the device.
func TestWatchOwnChangesNeverDump(t *testing.T) {
	w := newWatched(t, setGuard{}, pfx("fd00::1/128")...)
	all := append(vips(100), netip.MustParsePrefix("fd00::a/128"))
	for i := range 10 {
		w.refresh(false)
		desired := all[i : 50+i*5]
		if r := w.m.Unbind(desired); r.Err() != nil {
			t.Fatal(r.Err())
		}
		if r := w.m.Bind(desired, nil); r.Err() != nil || (i > 0 && r.Bound == 0) {
			t.Fatalf("%d: %+v", i, r)
		}
	}
	w.refresh(false)
	if w.kicks.Load() != 0 || w.m.Foreign() != 0 {
		t.Fatalf("own changes seen as foreign: %d kicks, %d foreign", w.kicks.Load(), w.m.Foreign())
	}
	// The view the manager trusts is the device's.
	if got, want := fmt.Sprint(w.m.Current()), fmt.Sprint(mustAddrs(w.link)); got != want {
		t.Fatalf("view %s\ndevice %s", got, want)
	}
}

func mustAddrs(l *addrmgrtest.FakeLink) []netip.Prefix { return l.Prefixes() }

func sortPrefixes(ps []netip.Prefix) { slices.SortFunc(ps, model.ComparePrefix) }

// A protected address added by hand: the watch marks the view stale and
// kicks; the next sync dumps and removes it; then no more dumps.
func TestWatchForeignProtectedAddRemovedNextSync(t *testing.T) {
	nodeIP := netip.MustParseAddr("192.168.1.10")
	w := newWatched(t, setGuard{nodeIP: model.ReasonNodeIP})
	desired := vips(20)
	w.m.Bind(desired, nil)
	w.refresh(false)

	w.link.Put(netip.PrefixFrom(nodeIP, 32))
	w.link.Flush()
	if w.kicks.Load() != 1 || w.m.Foreign() != 1 {
		t.Fatalf("hand-added address: %d kicks, %d foreign; want 1, 1", w.kicks.Load(), w.m.Foreign())
	}
	w.refresh(true)
	if w.m.Drift() != 1 {
		t.Errorf("drift %d, want 1", w.m.Drift())
	}
	u := w.m.Unwanted(desired)
	if len(u) != 1 || u[0].Prefix.Addr() != nodeIP || u[0].Why == "not desired" {
		t.Fatalf("unwanted %+v", u)
	}
	if r := w.m.Remove(u); r.Unbound != 1 {
		t.Fatalf("%+v", r)
	}
	if got := fmt.Sprint(mustAddrs(w.link)); got != fmt.Sprint(desired) {
		t.Fatalf("device %s", got)
	}
	w.refresh(false)
	if w.kicks.Load() != 1 {
		t.Errorf("the removal kicked again: %d kicks", w.kicks.Load())
	}
}

// A VIP removed by hand is bound again at the next sync.
func TestWatchForeignRemovalRebound(t *testing.T) {
	w := newWatched(t, setGuard{})
	desired := vips(5)
	w.m.Bind(desired, nil)
	w.refresh(false)
	w.link.Take(desired[2])
	w.link.Flush()
	if w.kicks.Load() != 1 {
		t.Fatalf("%d kicks", w.kicks.Load())
	}
	w.refresh(true)
	if r := w.m.Bind(desired, nil); r.Bound != 1 {
		t.Fatalf("%+v", r)
	}
	w.refresh(false)
}

// Events lost (overflow): every sync dumps until the subscription is back,
// then one more dump, then none.
func TestWatchOverflowForcesDump(t *testing.T) {
	w := newWatched(t, setGuard{})
	w.m.Bind(vips(3), nil)
	w.refresh(false)
	w.link.Lose(errors.New("no buffer space available"))
	w.link.Flush()
	if w.kicks.Load() != 1 || w.m.Watching() {
		t.Fatalf("%d kicks, watching %v", w.kicks.Load(), w.m.Watching())
	}
	w.refresh(true)
	w.m.Bind(vips(4), nil)
	w.refresh(true)
	w.link.Resume()
	w.link.Flush()
	if w.kicks.Load() != 2 || !w.m.Watching() {
		t.Fatalf("%d kicks, watching %v", w.kicks.Load(), w.m.Watching())
	}
	w.refresh(true)
	w.m.Bind(vips(6), nil)
	w.refresh(false)
}

// Without a subscription every sync dumps, as without a watch at all.
func TestNoWatchEverySyncDumps(t *testing.T) {
	link := addrmgrtest.NewFakeLink()
	link.WatchErr = errors.New("no netlink")
	m := addrmgr.NewManager(link, setGuard{}, nil)
	if err := m.Watch(context.Background(), nil); err == nil || m.Watching() {
		t.Fatalf("Watch: %v, watching %v", err, m.Watching())
	}
	for i := range 3 {
		if dumped, err := m.Refresh(); !dumped || err != nil || link.Dumps != i+1 {
			t.Fatalf("refresh %d: dumped %v, %v, %d dumps", i, dumped, err, link.Dumps)
		}
	}
	type plain struct{ addrmgr.Link }
	m2 := addrmgr.NewManager(plain{addrmgrtest.NewFakeLink()}, setGuard{}, nil)
	if err := m2.Watch(context.Background(), nil); !errors.Is(err, addrmgr.ErrNoWatch) {
		t.Fatalf("Watch of a plain Link: %v", err)
	}
	// A watch that ended (its context) is no watch.
	ctx, cancel := context.WithCancel(context.Background())
	l2 := addrmgrtest.NewFakeLink()
	m3 := addrmgr.NewManager(l2, setGuard{}, nil)
	if err := m3.Watch(ctx, nil); err != nil {
		t.Fatal(err)
	}
	m3.Refresh()
	cancel()
	for m3.Watching() {
		time.Sleep(time.Millisecond)
	}
	if dumped, _ := m3.Refresh(); !dumped {
		t.Fatal("no dump after the watch ended")
	}
}

// A change by others seen while a dump runs may be newer than the dump:
// the next sync dumps again.
func TestWatchEventDuringDumpKeepsStale(t *testing.T) {
	w := newWatched(t, setGuard{})
	w.link.Put(netip.MustParsePrefix("10.0.0.1/32"))
	w.link.Flush()
	inner := w.link
	d := &duringDump{FakeLink: inner, during: func() {
		// Added after the dump's snapshot, reported while it runs.
		inner.Put(netip.MustParsePrefix("10.0.0.2/32"))
		inner.Flush()
	}}
	w.m.SetLink(d)
	if dumped, err := w.m.Refresh(); !dumped || err != nil {
		t.Fatal(dumped, err)
	}
	d.during = nil
	if dumped, _ := w.m.Refresh(); !dumped {
		t.Fatal("an event seen during the dump did not make the next sync dump")
	}
	if !w.m.Bound(netip.MustParseAddr("10.0.0.2")) {
		t.Fatal("second dump missed the address")
	}
	w.refresh(false)
}

type duringDump struct {
	*addrmgrtest.FakeLink
	during func()
}

func (d *duringDump) Addrs() ([]netip.Prefix, error) {
	ps, err := d.FakeLink.Addrs()
	if d.during != nil {
		d.during()
	}
	return ps, err
}

// An own change whose event never comes (the address was already there)
// leaves an expectation; the next event of that address in the other
// direction drops it, so it cannot hide a later change by others.
func TestWatchUnmetExpectationDropped(t *testing.T) {
	w := newWatched(t, setGuard{})
	p := netip.MustParsePrefix("10.96.0.9/32")
	w.m.Expect(p, true) // an add that caused no event
	w.m.SetCur(p, true)
	id := w.m.Expect(p, false)
	_ = id
	w.m.OnEvent(addrmgr.AddrEvent{Prefix: p, Added: false}) // the removal's event
	w.m.SetCur(p, false)
	if n := w.m.Pending(p); n != 0 {
		t.Fatalf("%d expectations left for %s", n, p)
	}
	w.m.OnEvent(addrmgr.AddrEvent{Prefix: p, Added: true}) // added by someone else
	if w.kicks.Load() != 1 || w.m.Foreign() != 1 {
		t.Fatalf("foreign add hidden: %d kicks", w.kicks.Load())
	}
	// A failed change's expectation is forgotten.
	q := netip.MustParsePrefix("10.96.0.10/32")
	w.link.OnAdd = func(netip.Prefix) error { return errors.New("refused") }
	if r := w.m.Bind([]netip.Prefix{q}, nil); len(r.Failures) != 1 {
		t.Fatalf("%+v", r)
	}
	if w.m.Pending(q) != 0 {
		t.Fatal("failed bind left its expectation")
	}
}

// countGuard counts its checks; fp is its fingerprint.
type countGuard struct {
	setGuard
	checks int
	fp     uint64
}

func (g *countGuard) Check(a netip.Addr) guard.Verdict {
	g.checks++
	return g.setGuard.Check(a)
}

func (g *countGuard) Fingerprint() uint64 { return g.fp }

// With a Fingerprinter, Unwanted checks the bound addresses only when the
// guard or the view changed; Bind of the same addresses does nothing.
func TestUnwantedChecksOnlyWhenGuardChanges(t *testing.T) {
	g := &countGuard{setGuard: setGuard{}, fp: 1}
	link := addrmgrtest.NewFakeLink()
	m := addrmgr.NewManager(link, g, nil)
	desired := vips(100)
	m.Dump()
	m.Bind(desired, nil)
	g.checks = 0
	if u := m.Unwanted(desired); len(u) != 0 || g.checks != 100 {
		t.Fatalf("first pass: %v, %d checks", u, g.checks)
	}
	g.checks = 0
	if u := m.Unwanted(desired); len(u) != 0 || g.checks != 0 {
		t.Fatalf("same guard: %v, %d checks", u, g.checks)
	}
	// Not desired any more: checked for the reason, removed.
	if u := m.Unwanted(desired[1:]); len(u) != 1 || g.checks != 1 {
		t.Fatalf("%v, %d checks", u, g.checks)
	}
	g.checks = 0
	muts := link.Mutations
	if r := m.Bind(desired, nil); r.Bound != 0 || g.checks != 0 || link.Mutations != muts {
		t.Fatalf("bind of what is bound: %+v, %d checks", r, g.checks)
	}
	// The guard changed: now it protects a bound address.
	g.setGuard = setGuard{desired[7].Addr(): model.ReasonNodeIP}
	g.fp = 2
	if u := m.Unwanted(desired); len(u) != 1 || u[0].Prefix != desired[7] || g.checks != 100 {
		t.Fatalf("new guard: %v, %d checks", u, g.checks)
	}
	// A dump that finds the device as it was brings nothing to check
	// (the periodic full sync's); one that finds it changed may bring
	// anything: checked again.
	g.checks = 0
	m.Dump()
	if m.Unwanted(desired); g.checks != 0 {
		t.Fatalf("after a dump of the same device: %d checks, want 0", g.checks)
	}
	link.Put(pfx("10.200.0.1/32")[0])
	m.Dump()
	if m.Unwanted(desired); g.checks != 101 {
		t.Fatalf("after a dump that found an address added by hand: %d checks, want 101", g.checks)
	}
	link.Take(pfx("10.200.0.1/32")[0])
	// Without a fingerprint, every pass checks every address.
	g2 := setGuardCounting{n: new(int)}
	m2 := addrmgr.NewManager(link, g2, nil)
	m2.Dump()
	m2.Unwanted(desired)
	m2.Unwanted(desired)
	if *g2.n != 200 {
		t.Fatalf("no fingerprint: %d checks, want 200", *g2.n)
	}
}

type setGuardCounting struct{ n *int }

func (g setGuardCounting) Check(netip.Addr) guard.Verdict {
	*g.n++
	return guard.Verdict{}
}

// TestGuardIsFingerprinter: the Manager checks the bound addresses again
// only when a *guard.Guard's fingerprint changed.
func TestGuardIsFingerprinter(t *testing.T) {
	if _, ok := addrmgr.Protector(guard.New(guard.Inputs{})).(addrmgr.Fingerprinter); !ok {
		t.Error("*guard.Guard is no Fingerprinter")
	}
}

// Syncs while others change the device and events arrive (run with -race).
func TestWatchConcurrent(t *testing.T) {
	w := newWatched(t, setGuard{netip.MustParseAddr("192.168.9.9"): model.ReasonNodeIP})
	desired := vips(200)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			w.link.Put(netip.MustParsePrefix("192.168.9.9/32"))
			w.link.Take(desired[i%len(desired)])
		}
	})
	for i := range 50 {
		if _, err := w.m.Refresh(); err != nil {
			t.Fatal(err)
		}
		d := desired[:100+i*2]
		w.m.Unbind(d)
		w.m.Bind(d, nil)
	}
	close(stop)
	wg.Wait()
	// Once others stop, one sync repairs everything.
	w.link.Flush()
	w.m.Refresh()
	w.m.Unbind(desired)
	w.m.Bind(desired, nil)
	if got := fmt.Sprint(mustAddrs(w.link)); got != fmt.Sprint(desired) {
		t.Fatalf("device after the repair: %s", got)
	}
	w.refresh(false)
}
