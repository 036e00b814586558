package ipvs_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestGraceNeverWritesDesired: the graceful-termination queue copies a
// mirror's real-server list before it takes a real server out of it, when
// that list is still a desired state's (mirrorVS.shared): a real server
// gone from the kernel behind the proxy's back (grace.go) and one whose
// graceful period ended (deleteRS). Through Full and Partial a queued real
// server is never in a shared list (its quiesce copied the list, and a
// desired real server leaves the queue), so the test builds that state
// itself: it is what the copies guard against if that ever changes.
func TestGraceNeverWritesDesired(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	clk := newClock()
	r := ipvs.NewReconciler(ft, ipvs.Options{Clock: clk, GracefulPeriod: time.Minute})
	gone := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	ended := vs("default/api:https", model.TCP, vip, 443, ep1, ep2)
	desired := []ipvs.VirtualServer{gone, ended}
	mustFull(t, r, desired, own(vip))
	was := [][]ipvs.RealServer{slices.Clone(gone.RealServers), slices.Clone(ended.RealServers)}
	for _, d := range desired {
		if m := r.Mirror()[d.Key]; !m.Shared() || &m.VS().RealServers[0] != &d.RealServers[0] {
			t.Fatalf("%v: the mirror does not share the desired list (shared %v)", d.Key, m.Shared())
		}
		// ep1 of both waits for its graceful end, queued before this sync.
		r.Grace()[ipvs.GraceKey{Key: d.Key, Addr: ep1, Port: 8080}] = clk.Now()
	}
	// gone's ep1 leaves the kernel behind the proxy's back; ended's ep1
	// keeps a connection until its period is over.
	if err := ft.DelRealServer(gone.Key, gone.RealServers[0]); err != nil {
		t.Fatal(err)
	}
	ft.SetConnections(ended.Key, ended.RealServers[0], 1, 0)
	clk.SetTime(clk.Now().Add(30 * time.Second))
	if res, err := r.Partial(ipvs.Desired{VirtualServers: nil, Changed: changed()}); err != nil || res.Err() != nil {
		t.Fatalf("Partial: %v %v", err, res.Err())
	}
	if r.Graceful() != 1 {
		t.Fatalf("after the first sync: graceful queue %d, want 1 (ended's ep1 keeps a connection)", r.Graceful())
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if res, err := r.Partial(ipvs.Desired{VirtualServers: nil, Changed: changed()}); err != nil || res.Err() != nil {
		t.Fatalf("Partial: %v %v", err, res.Err())
	}
	for i, d := range desired {
		if !slices.Equal(d.RealServers, was[i]) {
			t.Errorf("%v: the graceful queue wrote into the desired state: %v, was %v", d.Key, d.RealServers, was[i])
		}
		if got, want := r.Mirror()[d.Key].VS().RealServers, d.RealServers[1:]; !slices.Equal(got, want) {
			t.Errorf("%v: mirror %v, want %v", d.Key, got, want)
		}
	}
	if r.Graceful() != 0 {
		t.Errorf("graceful queue %d, want 0", r.Graceful())
	}
}
