package ipvs_test

import (
	"errors"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestFullFromKeepsWritesSinceTheRead: partial syncs run between
// BeginRead's dump and FullFrom. What they wrote is newer than the dump
// and stays; what others changed before the dump is repaired as by Full.
func TestFullFromKeepsWritesSinceTheRead(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	api := vs("default/api:http", model.TCP, vip, 81, ep1)
	old := vs("default/old:http", model.TCP, vip, 82, ep2)
	dns := vs("default/dns:dns", model.UDP, vip, 53, ep1)
	mustFull(t, r, []ipvs.VirtualServer{web, api, old, dns}, own(vip))

	// Before the read: someone deletes a real server of dns.
	if err := ft.DelRealServer(dns.Key, dns.RealServers[0]); err != nil {
		t.Fatal(err)
	}
	read := r.BeginFull()
	if !r.Reading() {
		t.Fatal("Reading after BeginRead = false")
	}
	kernel, err := read()
	if err != nil {
		t.Fatal(err)
	}
	// After the read: partial syncs add a real server to web, delete old
	// and create new.
	web.RealServers = append(web.RealServers, ipvs.RealServer{Address: ep3, Port: 8080, Weight: 1})
	added := vs("default/new:http", model.TCP, vip, 83, ep3)
	res, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{web, added}, Changed: changed("default/web", "default/old", "default/new")})
	if err != nil || res.Err() != nil || res.RealServersAdded != 2 || res.ServicesAdded != 1 || res.ServicesDeleted != 1 {
		t.Fatalf("partial: %+v %v %v", res, err, res.Err())
	}

	desired := []ipvs.VirtualServer{web, api, added, dns}
	res, err = r.FullFrom(ipvs.Desired{VirtualServers: desired, Own: own(vip)}, kernel, nil)
	if err != nil || res.Err() != nil {
		t.Fatalf("FullFrom: %v %v", err, res.Err())
	}
	// Only dns drifted and is repaired; web, new and old are as the
	// partial left them, not as the older dump had them.
	if res.Drift.Total() != 1 || res.RealServersAdded != 1 || res.ServicesAdded != 0 || res.ServicesDeleted != 0 || res.Changes() != 1 {
		t.Errorf("FullFrom: %+v, want dns's real server added back and nothing else", res)
	}
	if got, want := ft.String(), ipvs.Save(desired); got != want {
		t.Errorf("kernel:\n%s\nwant:\n%s", got, want)
	}
	if r.Reading() {
		t.Error("Reading after FullFrom = true")
	}
	if _, err := r.FullFrom(ipvs.Desired{VirtualServers: desired, Own: own(vip)}, kernel, nil); !errors.Is(err, layer.ErrNoRead) {
		t.Errorf("a second FullFrom: %v, want ErrNoRead", err)
	}
	// The mirror is the kernel's: a Full finds no drift.
	if res := mustFull(t, r, desired, own(vip)); res.Drift.Total() != 0 || res.Changes() != 0 {
		t.Errorf("Full after FullFrom: %+v", res)
	}
}

// TestFullKeepsMatchingMirror: a Full whose dump equals the mirror keeps
// the mirror's entries, and the plan's lists they share, rather than the
// dump's copies.
func TestFullKeepsMatchingMirror(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	mustFull(t, r, []ipvs.VirtualServer{web}, own(vip))
	before := r.Mirror()[web.Key]
	if !before.Shared() {
		t.Fatal("the first Full did not share the plan's list")
	}
	mustFull(t, r, []ipvs.VirtualServer{web}, own(vip))
	if r.Mirror()[web.Key] != before || &r.Mirror()[web.Key].VS().RealServers[0] != &web.RealServers[0] {
		t.Error("an unchanged Full replaced the mirror entry")
	}
	// A drift replaces it by the dump's, and the repair shares the plan's
	// list again.
	if err := ft.UpdateRealServer(web.Key, ipvs.RealServer{Address: ep2, Port: 8080, Weight: 3}); err != nil {
		t.Fatal(err)
	}
	if res := mustFull(t, r, []ipvs.VirtualServer{web}, own(vip)); res.Drift.Total() != 1 || res.RealServersUpdated != 1 {
		t.Errorf("repair: %+v", res)
	}
	if got := r.Mirror()[web.Key]; got == before || !got.Shared() || &got.VS().RealServers[0] != &web.RealServers[0] {
		t.Error("the repaired entry does not share the plan's list")
	}
}

func TestSameRealServers(t *testing.T) {
	rs := func(ws ...int32) []ipvs.RealServer {
		var out []ipvs.RealServer
		for i, w := range ws {
			out = append(out, ipvs.RealServer{Address: ep1, Port: uint16(8000 + i), Weight: w})
		}
		return out
	}
	long := make([]int32, ipvs.SmallRealServers+1)
	for _, tc := range []struct {
		name string
		a, b []ipvs.RealServer
		want bool
	}{
		{"equal", rs(1, 1), rs(1, 1), true},
		{"order", rs(1, 2), []ipvs.RealServer{rs(1, 2)[1], rs(1, 2)[0]}, true},
		{"weight", rs(1, 1), rs(1, 0), false},
		{"length", rs(1), rs(1, 1), false},
		{"port", rs(1), []ipvs.RealServer{{Address: ep1, Port: 9, Weight: 1}}, false},
		{"long equal", rs(long...), rs(long...), true},
		{"long weight", rs(long...), rs(append(make([]int32, ipvs.SmallRealServers), 1)...), false},
	} {
		if got := ipvs.SameRealServers(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: sameRealServers = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFullSharesThePlansListAfterAdoption: a restarted proxy adopts each
// virtual server from the dump, whose real servers the kernel lists newest
// first. The full sync still finds it as planned and keeps the plan's list
// as the mirror's, so the next full sync skips it (programmed) instead of
// walking its real servers again.
func TestFullSharesThePlansListAfterAdoption(t *testing.T) {
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	r := ipvs.NewReconciler(ipvstest.NewFakeTable(web), ipvs.Options{})
	if res := mustFull(t, r, []ipvs.VirtualServer{web}, own(vip)); res.Changes() != 0 {
		t.Fatalf("adoption changed the kernel: %+v", res)
	}
	if m := r.Mirror()[web.Key]; !m.Programmed(&web) {
		t.Errorf("the adopted entry (%v) does not share the plan's list (%v)", m.VS().RealServers, web.RealServers)
	}
}
