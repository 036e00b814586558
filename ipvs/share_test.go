package ipvs_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestMirrorSharesDesiredRealServers: the mirror keeps the real-server
// lists it programmed exactly as the desired virtual servers' own (no copy
// per virtual server), and copies a list before it changes it, so that a
// quiesce, a reweight, a deletion or a graceful termination never writes
// into the desired state a caller still holds (the planner's, read-only).
func TestMirrorSharesDesiredRealServers(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	clk := newClock()
	r := ipvs.NewReconciler(ft, ipvs.Options{Clock: clk, GracefulPeriod: time.Minute, Conntrack: &fakeConntrack{flows: map[string]int{}}})
	tcp := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	udp := vs("kube-system/dns:dns", model.UDP, vip, 53, ep1, ep2)
	first := []ipvs.VirtualServer{tcp, udp}
	mustFull(t, r, first, own(vip))
	for _, d := range first {
		m := r.Mirror()[d.Key]
		if !m.Shared() || &m.VS().RealServers[0] != &d.RealServers[0] {
			t.Fatalf("%v: the mirror copied the desired real servers (shared %v)", d.Key, m.Shared())
		}
	}
	kept := func(d ipvs.VirtualServer) []ipvs.RealServer { return slices.Clone(d.RealServers) }
	was := [][]ipvs.RealServer{kept(tcp), kept(udp)}
	check := func(step string) {
		t.Helper()
		for i, d := range first {
			if !slices.Equal(d.RealServers, was[i]) {
				t.Fatalf("%s: the desired state of an earlier sync changed under its caller: %v, was %v", step, d.RealServers, was[i])
			}
		}
	}

	// ep1 leaves both: the TCP one is quiesced (weight 0), the UDP one
	// deleted at once; nothing is added or reweighted.
	tcp2 := vs("default/web:http", model.TCP, vip, 80, ep2)
	udp2 := vs("kube-system/dns:dns", model.UDP, vip, 53, ep2)
	if res, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{tcp2, udp2}, Changed: changed("default/web", "kube-system/dns")}); err != nil || res.Err() != nil {
		t.Fatalf("Partial: %v %v", err, res.Err())
	}
	check("quiesce and delete")
	if m := r.Mirror()[udp2.Key]; !m.Shared() || &m.VS().RealServers[0] != &udp2.RealServers[0] {
		t.Errorf("the UDP mirror, equal to its desired list again, does not share it")
	}
	want := lines(
		"-A -u 10.96.0.10:53 -s rr",
		"-a -u 10.96.0.10:53 -r 10.244.2.6:8080 -m -w 1",
		"-A -t 10.96.0.10:80 -s rr",
		"-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 0",
		"-a -t 10.96.0.10:80 -r 10.244.2.6:8080 -m -w 1",
	)
	if got := ft.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}

	// A reweight of a shared list.
	udp3 := vs("kube-system/dns:dns", model.UDP, vip, 53, ep2)
	udp3.RealServers[0].Weight = 2
	if _, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{tcp2, udp3}, Changed: changed("kube-system/dns")}); err != nil {
		t.Fatal(err)
	}
	if udp2.RealServers[0].Weight != 1 {
		t.Fatalf("reweight: the desired list of the last sync changed: %v", udp2.RealServers)
	}

	// The quiesced ep1's graceful termination ends.
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	if _, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{tcp2, udp3}, Changed: changed()}); err != nil {
		t.Fatal(err)
	}
	check("graceful termination")
	if !slices.Equal(tcp2.RealServers, kept(vs("default/web:http", model.TCP, vip, 80, ep2))) {
		t.Fatalf("graceful termination: the desired list changed: %v", tcp2.RealServers)
	}
	if got := r.Mirror()[tcp2.Key].VS().RealServers; !slices.Equal(got, tcp2.RealServers) {
		t.Fatalf("mirror after the graceful termination: %v, want %v", got, tcp2.RealServers)
	}
}
