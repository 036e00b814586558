package ipvs_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestFullFromInTurns: changes that arrive while a full sync walks the
// desired virtual servers are applied between its batches (a Turn), and
// the full sync goes on with the list they leave: a service changed
// after the turn's point is not set back to its older list, one added
// before that point is not deleted as stale, one removed is not created
// again, and the table ends as the newest list says.
func TestFullFromInTurns(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	n := 2*ipvs.CreateBatch + 200
	var desired []ipvs.VirtualServer
	for i := range n {
		desired = append(desired, vs(fmt.Sprintf("ns/s%04d:http", i), model.TCP, vip, uint16(1000+i), ep1))
	}
	slices.SortFunc(desired, func(a, b ipvs.VirtualServer) int { return ipvs.CompareKeys(a.Key, b.Key) })
	mustFull(t, r, desired, own(vip))

	read := r.BeginFull()
	dump, err := read()
	if err != nil {
		t.Fatal(err)
	}
	// What arrives once the walk began: a service past the first batch
	// gains a real server; s0010, in it, is deleted; early, a new service
	// whose key sorts before every other.
	late := desired[n-100]
	late.RealServers = append(slices.Clone(late.RealServers), ipvs.RealServer{Address: ep2, Port: 8080, Weight: 1})
	gone := desired[10]
	early := vs("ns/early:http", model.TCP, vip, 999, ep3)
	next := slices.Clone(desired)
	next[n-100] = late
	next = slices.Delete(next, 10, 11)
	next = slices.Insert(next, 0, early)

	var turns, took int
	turn := func() (ipvs.Desired, bool) {
		turns++
		if turns > 1 {
			return ipvs.Desired{}, false
		}
		took++
		res, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{early, late}, Changed: changed("ns/early", late.Service.NamespacedName.String(), gone.Service.NamespacedName.String())})
		if err != nil || res.Err() != nil {
			t.Fatalf("the turn's partial sync: %v %v", err, res.Err())
		}
		return ipvs.Desired{VirtualServers: next}, true
	}
	res, err := r.FullFrom(ipvs.Desired{VirtualServers: desired, Own: own(vip)}, dump, turn)
	if err != nil || res.Err() != nil {
		t.Fatalf("FullFrom: %v %v", err, res.Err())
	}
	if turns != 2 || took != 1 {
		t.Errorf("turns asked %d, taken %d; want one between each two of the 3 batches, the first taken", turns, took)
	}
	if got, want := ft.String(), ipvs.Save(next); got != want {
		t.Errorf("the table after the full sync in turns is not the newest list:\n%s", diffLines(got, want))
	}
	if res.Changes() != 0 {
		t.Errorf("the full sync itself changed %d things (%+v); the turn's partial sync made every change", res.Changes(), res)
	}
	// The mirror is the table's: a Full of the newest list finds nothing.
	if res := mustFull(t, r, next, own(vip)); res.Drift.Total() != 0 || res.Changes() != 0 {
		t.Errorf("Full after the full sync in turns: %+v", res)
	}
}

// diffLines lists the lines only one of got and want has.
func diffLines(got, want string) string {
	return fmt.Sprintf("only in the table: %q\nonly in the list: %q", onlyIn(got, want), onlyIn(want, got))
}

func onlyIn(a, b string) []string {
	in := map[string]bool{}
	for _, l := range strings.Split(b, "\n") {
		in[l] = true
	}
	return slices.DeleteFunc(strings.Split(a, "\n"), func(l string) bool { return in[l] })
}
