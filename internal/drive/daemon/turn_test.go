package daemon

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestChangeTakesATurnInAPeriodicFullSync: changes that arrive once a
// periodic full sync from its read took its changes are applied in a turn
// inside it (a partial sync, reported before the full sync ends), not
// after it, and the full sync goes on with the state they leave: the node
// ends as a fresh loop programs the same services, a service changed late
// in the walk is not set back, one added early is not deleted, one
// removed is not created again.
func TestChangeTakesATurnInAPeriodicFullSync(t *testing.T) {
	l, src, node, reps := newTurnBed(t)

	late, gone, early := svcKey(1900), svcKey(3), types.NamespacedName{Namespace: "ns", Name: "early"}
	var replaced netip.Addr
	arriveInTheWalk(src, func() { replaced = changeInTheWalk(src, late, gone, early) })
	readBeside(t, l)
	l.syncOnce()

	checkOneTurn(t, l, src, *reps, []types.NamespacedName{early, gone, late})

	// A fresh loop over a fresh node, from the same services.
	fresh := scaleNode{ipvstest.NewFakeTable(), addrmgrtest.NewFakeLink(), iptablestest.NewFakeSets()}
	fl, _, flast := newScaleLoopOn(t, 1, fresh)
	fl.Source = src
	fl.needFull = true
	if fl.syncOnce(); flast.Err != nil {
		t.Fatal(flast.Err)
	}
	// The replaced endpoint is quiesced (weight 0) until its connections
	// end, as any removed one; a fresh sync never had it.
	quiesced := fmt.Sprintf(" -r %s:8080 -m -w 0", replaced)
	got := strings.Join(slices.DeleteFunc(strings.Split(node.table.String(), "\n"), func(l string) bool { return strings.HasSuffix(l, quiesced) }), "\n")
	if want := fresh.table.String(); got != want {
		t.Errorf("IPVS after the full sync in turns differs from a fresh sync's:\n%s", lineDiff(got, want))
	}
	if got, want := node.link.String(), fresh.link.String(); got != want {
		t.Errorf("kube-ipvs0 after the full sync in turns differs from a fresh sync's")
	}
	if got, want := setMembers(t, node.sets), setMembers(t, fresh.sets); !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ipsets after the full sync in turns differ from a fresh sync's")
	}
}

// TestTurnsKeepTheRetryBackoff: a change whose apply fails in a turn of a
// periodic full sync is requeued and waits out its backoff (retryAt), as
// after any failed sync: it is not applied again at every later turn
// point of the same full sync (every 512 virtual servers of the walk).
func TestTurnsKeepTheRetryBackoff(t *testing.T) {
	l, src, node, reps := newTurnBed(t)
	l.BackoffInitial, l.BackoffMax = time.Hour, time.Hour

	bad := types.NamespacedName{Namespace: "ns", Name: "bad"}
	badIP := netip.MustParseAddr("10.95.0.1")
	node.table.Fail = func(op string, k ipvs.Key) error {
		if op == "AddService" && k.Address == badIP {
			return errors.New("refused")
		}
		return nil
	}
	src.onPending = func() {
		src.mu.Lock()
		defer src.mu.Unlock()
		src.svcs[bad] = model.ServicePort{Name: model.ServicePortName{NamespacedName: bad, Port: "http"}, Protocol: model.TCP, Port: 80,
			ClusterIPs: []netip.Addr{badIP}}
		src.eps[bad] = []model.Endpoint{{Address: netip.MustParseAddr("10.250.0.2"), Port: 8080, Ready: true, Serving: true}}
		src.dirty[bad] = true
	}
	readBeside(t, l)
	l.syncOnce()

	failed := 0
	for _, rep := range *reps {
		if !rep.Full && rep.Err != nil {
			failed++
		}
	}
	if failed > 1 {
		t.Errorf("one periodic full sync applied the failing change %d times in its turns, each failing, with an hour's backoff; want once", failed)
	}
}

// TestTurnLeavesTheFullSyncsNewServiceToIt: a periodic full sync that took
// a new Service with its changes creates its virtual server in its IPVS
// walk and binds its ClusterIP at its end. A change that arrives
// meanwhile takes a turn, whose partial sync binds the ready addresses of
// the whole state: the new Service's, whose virtual server the walk has
// not reached yet, is the full sync's to bind, not a failure of the turn
// (which would be counted, logged, the new Service requeued and a retry
// backed off although nothing failed).
func TestTurnLeavesTheFullSyncsNewServiceToIt(t *testing.T) {
	l, src, _, reps := newTurnBed(t)

	// Taken by the periodic full sync: its ClusterIP sorts after every
	// other, in the walk's last batch.
	fresh := types.NamespacedName{Namespace: "ns", Name: "fresh"}
	src.svcs[fresh] = model.ServicePort{Name: model.ServicePortName{NamespacedName: fresh, Port: "http"}, Protocol: model.TCP, Port: 80,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.97.0.1")}}
	src.eps[fresh] = []model.Endpoint{{Address: netip.MustParseAddr("10.250.0.3"), Port: 8080, Ready: true, Serving: true}}
	src.dirty[fresh] = true
	changed := svcKey(3)
	arriveInTheWalk(src, func() {
		src.mu.Lock()
		defer src.mu.Unlock()
		eps := append([]model.Endpoint(nil), src.eps[changed]...)
		eps[0].Address = netip.MustParseAddr("10.250.0.4")
		src.eps[changed] = eps
		src.dirty[changed] = true
	})
	readBeside(t, l)
	l.syncOnce()
	for i, rep := range *reps {
		if rep.Err != nil {
			t.Errorf("sync %d of %d (full %t, services %v) failed: %v", i+1, len(*reps), rep.Full, rep.Services, rep.Err)
		}
	}
	if len(*reps) != 2 {
		t.Errorf("%d syncs reported, want 2: the turn's and the full sync's", len(*reps))
	}
}

// changeInTheWalk is the change of TestChangeTakesATurnInAPeriodicFullSync
// and its kernel twin, made in src: late's first endpoint replaced by 10.250.0.1, gone
// removed, early added with a ClusterIP (10.95.0.1) that sorts before
// every other, in the walk's first batch. It returns the replaced
// endpoint's address.
func changeInTheWalk(src *fakeSource, late, gone, early types.NamespacedName) netip.Addr {
	src.mu.Lock()
	defer src.mu.Unlock()
	eps := slices.Clone(src.eps[late])
	replaced := eps[0].Address
	eps[0].Address = netip.MustParseAddr("10.250.0.1")
	src.eps[late] = eps
	delete(src.svcs, gone)
	delete(src.eps, gone)
	src.svcs[early] = model.ServicePort{Name: model.ServicePortName{NamespacedName: early, Port: "http"}, Protocol: model.TCP, Port: 80,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.95.0.1")}}
	src.eps[early] = []model.Endpoint{{Address: netip.MustParseAddr("10.250.0.2"), Port: 8080, Ready: true, Serving: true}}
	for _, k := range []types.NamespacedName{late, gone, early} {
		src.dirty[k] = true
	}
	src.triggers[late] = time.Now()
	return replaced
}

// checkOneTurn checks what a periodic full sync in which changed took one
// turn reports: two syncs, the turn's partial sync of exactly changed
// (sorted) and then the full sync, with one turn and no services of its
// own, neither failed, and nothing left waiting.
func checkOneTurn(t *testing.T, l *Loop, src *fakeSource, reps []SyncReport, changed []types.NamespacedName) {
	t.Helper()
	if len(reps) != 2 {
		t.Errorf("%d syncs reported (%s), want 2: the turn's partial sync, the periodic full sync", len(reps), reportsString(reps))
	} else {
		turn, full := reps[0], reps[1]
		if turn.Full || turn.Err != nil || !slices.Equal(turn.Services, changed) {
			t.Errorf("the turn: full %t, services %v, error %v; want a partial sync of %v", turn.Full, turn.Services, turn.Err, changed)
		}
		if !full.Full || full.Err != nil || full.Turns != 1 || len(full.Services) != 0 {
			t.Errorf("the periodic full sync: full %t, turns %d, services %v, error %v; want one turn and none of the changes taken itself", full.Full, full.Turns, full.Services, full.Err)
		}
	}
	if src.Pending() != 0 || l.needFull || l.dirty {
		t.Errorf("after the full sync: %d changes pending, needFull %t, dirty %t; want nothing left", src.Pending(), l.needFull, l.dirty)
	}
}

// reportsString is what each sync report says of the turn test: partial
// or full, turns, services, error.
func reportsString(reps []SyncReport) string {
	var b strings.Builder
	for i, r := range reps {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "full %t turns %d services %v error %v", r.Full, r.Turns, r.Services, r.Err)
	}
	return b.String()
}

// newTurnBed is a loop over the fakes with 2,000 services (2,500 virtual
// servers: five batches of the IPVS walk) after its first full sync, and
// the reports of its syncs from then on.
func newTurnBed(t *testing.T) (*Loop, *fakeSource, scaleNode, *[]SyncReport) {
	t.Helper()
	node := scaleNode{ipvstest.NewFakeTable(), addrmgrtest.NewFakeLink(), iptablestest.NewFakeSets()}
	l, src, last := newScaleLoopOn(t, 2000, node)
	l.needFull = true
	if l.syncOnce(); last.Err != nil {
		t.Fatalf("the first full sync: %v", last.Err)
	}
	reps := new([]SyncReport)
	l.Observe = func(rep SyncReport, _ Stats) { *reps = append(*reps, rep) }
	return l, src, node, reps
}

// arriveInTheWalk makes change happen at the fourth question whether
// changes wait (the loop's metrics, the turns before the kube-ipvs0 dump
// and before the IPVS step, then the first between two batches of the
// IPVS walk): inside a periodic full sync's IPVS walk.
func arriveInTheWalk(src *fakeSource, change func()) {
	asked := 0
	var arrive func()
	arrive = func() {
		if asked++; asked < 4 {
			src.onPending = arrive
			return
		}
		change()
	}
	src.onPending = arrive
}

func svcKey(i int) types.NamespacedName {
	return types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%05d", i)}
}

// setMembers are every set's entries, rendered and sorted.
func setMembers(t *testing.T, sets *iptablestest.FakeSets) map[string][]string {
	t.Helper()
	all, err := sets.ListAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for name, ks := range all {
		var es []string
		for _, e := range ks.Entries {
			es = append(es, fmt.Sprint(e))
		}
		slices.Sort(es)
		out[name] = es
	}
	return out
}

// lineDiff lists the lines only got or only want has.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	return fmt.Sprintf("only after the turns: %q\nonly in a fresh sync: %q",
		slices.DeleteFunc(slices.Clone(g), func(l string) bool { return slices.Contains(w, l) }),
		slices.DeleteFunc(slices.Clone(w), func(l string) bool { return slices.Contains(g, l) }))
}
