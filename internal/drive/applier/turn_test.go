package applier

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// turnStates: base has 300 services (600 virtual servers, more than one
// IPVS batch of 512) on 10.96.x.y; withX adds ns/x on 10.97.0.1, whose
// virtual servers sort after the first batch; changed is withX with
// ns/s000's real servers moved (a change a turn applies).
func turnStates() (base, withX, changed *planner.State) {
	var specs []string
	for i := range 300 {
		specs = append(specs, fmt.Sprintf("ns/s%03d=10.96.%d.%d", i, i/250, i%250+1))
	}
	sortState := func(st *planner.State) *planner.State {
		slices.SortFunc(st.VirtualServers, func(a, b ipvs.VirtualServer) int { return ipvs.CompareKeys(a.Key, b.Key) })
		slices.SortFunc(st.Addresses, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		return st
	}
	base = sortState(state(specs...))
	withX = sortState(state(append(slices.Clone(specs), "ns/x=10.97.0.1")...))
	changed = &planner.State{VirtualServers: slices.Clone(withX.VirtualServers), Addresses: withX.Addresses, IPSets: withX.IPSets}
	for i := range changed.VirtualServers {
		if changed.VirtualServers[i].Service.NamespacedName == svcName("ns/s000") {
			changed.VirtualServers[i].RealServers = []ipvs.RealServer{{Address: netip.MustParseAddr("10.244.9.9"), Port: 8080, Weight: 1}}
		}
	}
	return base, withX, changed
}

// runFullInTurns runs a periodic full sync of withX (ns/x new in it, so
// created by the full sync's IPVS walk in its second batch, and bound at
// its end) from a read, whose turn in the IPVS walk applies, if change, a
// change of ns/s000 as the daemon does (a Partial); atTurn is called at
// each turn with its number (3: the IPVS walk's, 4: after the IPVS step),
// and the turn 3 partial's result.
func runFullInTurns(t *testing.T, b *bed, change bool, atTurn func(n int, partial *Result)) {
	base, withX, changed := turnStates()
	if res, err := b.a.Full(base, []netip.Addr{nodeIP}); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	rb, err := b.a.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var partial *Result
	turn := func() *planner.State {
		n++
		if n == 3 && change {
			res, err := b.a.Partial(changed, svcName("ns/s000"))
			if err != nil {
				t.Fatal(err)
			}
			partial = res
			atTurn(n, partial)
			return changed
		}
		atTurn(n, partial)
		return nil
	}
	res, err := b.a.FullFrom(withX, []netip.Addr{nodeIP}, rb, turn)
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if n < 4 {
		t.Fatalf("%d turns, want at least 4", n)
	}
}

// TestTurnKeepsTheFullSyncsJournal: the full sync journals, before any
// change (Record), the desired virtual servers on addresses it has not
// bound yet: ns/x's, created by its IPVS walk and bound only at its end.
// A turn's partial sync leaves the journal to the full sync: a prune
// (Settle keeps mirrored keys only) while the walk has not created them
// yet would drop them, and a kill -9 once the walk created them and
// before the bind, then a restart after ns/x was deleted, would leak
// them: neither bound nor journaled, foreign to the restarted proxy.
func TestTurnKeepsTheFullSyncsJournal(t *testing.T) {
	for _, change := range []bool{false, true} {
		t.Run(fmt.Sprintf("turnTakesAChange=%t", change), func(t *testing.T) { turnJournal(t, change) })
	}
}

func turnJournal(t *testing.T, change bool) {
	b := newBed(t, setGuard{})
	dir := t.TempDir()
	journal := ipvs.NewFileJournal(dir)
	b.a = New(ipvs.NewReconciler(b.table, ipvs.Options{Journal: journal}), addrmgr.NewManager(b.link, setGuard{}, nil), b.rules, nil)
	x80 := netip.MustParseAddrPort("10.97.0.1:80")
	checked := false
	runFullInTurns(t, b, change, func(n int, _ *Result) {
		if n != 4 {
			return
		}
		checked = true
		// After the IPVS step, before the ipsets, rules and binds: the
		// moment of a kill -9.
		if !strings.Contains(b.table.String(), "-A -t "+x80.String()) || strings.Contains(b.link.String(), "10.97.0.1/") {
			t.Fatalf("setup: ns/x's virtual servers should exist and its address be unbound:\n%s", b.link)
		}
		addrs, keys, err := journal.Load()
		if err != nil {
			t.Fatal(err)
		}
		journaled := slices.Contains(addrs, x80.Addr()) || slices.ContainsFunc(keys, func(k ipvs.Key) bool { return k.Address == x80.Addr() })
		// The restart: a copy of the kernel and of the journal, ns/x
		// deleted meanwhile.
		vss, _ := b.table.Services()
		table := ipvstest.NewFakeTable(vss...)
		bound, _ := b.link.Addrs()
		link := addrmgrtest.NewFakeLink(bound...)
		dir2 := t.TempDir()
		if data, err := os.ReadFile(filepath.Join(dir, ipvs.JournalFile)); err == nil {
			if err := os.WriteFile(filepath.Join(dir2, ipvs.JournalFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		a2 := New(ipvs.NewReconciler(table, ipvs.Options{Journal: ipvs.NewFileJournal(dir2)}), addrmgr.NewManager(link, setGuard{}, nil), &fakeRules{}, nil)
		base, _, _ := turnStates()
		if res, err := a2.Full(base, []netip.Addr{nodeIP}); err != nil || res.Err() != nil {
			t.Fatal(err, res.Err())
		}
		if leaked := strings.Contains(table.String(), "10.97.0.1"); leaked || !journaled {
			t.Errorf("killed after the IPVS step of a full sync in turns: ns/x journaled %t (journal %v %v); "+
				"after a restart without ns/x its virtual servers are left: %t", journaled, addrs, keys, leaked)
		}
	})
	if !checked {
		t.Fatal("no turn after the IPVS step")
	}
}

// TestTurnLeavesTheFullSyncsBinds: the turn's partial sync binds every
// desired address of the newer state whose virtual servers exist; ns/x's,
// which the running full sync has yet to create in its walk, is not a
// failure of the turn (ns/x did not change), and the full sync binds it
// itself.
func TestTurnLeavesTheFullSyncsBinds(t *testing.T) {
	b := newBed(t, setGuard{})
	runFullInTurns(t, b, true, func(n int, partial *Result) {
		if n == 3 && partial.Err() != nil {
			t.Errorf("the turn's partial sync of ns/s000 failed: %v (services %v)", partial.Err(), partial.FailedServices())
		}
	})
	if !strings.Contains(b.link.String(), "10.97.0.1/32") {
		t.Errorf("ns/x not bound after the full sync")
	}
}
