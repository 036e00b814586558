package ipvs_test

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestDigestIsTheFullSyncsComparison: two virtual servers have the same
// Digest exactly when the full sync takes them for the same
// (sameService and sameRealServers), over random pairs that differ in one
// thing or in nothing but the real servers' order.
func TestDigestIsTheFullSyncsComparison(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	addrs := []netip.Addr{ep1, ep2, ep3, netip.MustParseAddr("::ffff:10.244.1.5"), netip.MustParseAddr("fd00::5")}
	random := func() ipvs.VirtualServer {
		v := ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: vip, Port: 80}, Scheduler: []string{"rr", "wrr", "sh", "mh"}[rnd.IntN(4)]}
		if rnd.IntN(2) == 0 {
			v.Flags, v.PersistenceTimeout = ipvs.FlagPersistent, uint32(rnd.IntN(3))*10800
		}
		for i := range rnd.IntN(6) {
			v.RealServers = append(v.RealServers, ipvs.RealServer{Address: addrs[rnd.IntN(len(addrs))], Port: uint16(8080 + i), Weight: rnd.Int32N(2)})
		}
		return v
	}
	edits := []func(v *ipvs.VirtualServer){
		func(v *ipvs.VirtualServer) {
			rnd.Shuffle(len(v.RealServers), func(i, j int) { v.RealServers[i], v.RealServers[j] = v.RealServers[j], v.RealServers[i] })
		},
		func(v *ipvs.VirtualServer) { v.Flags |= ipvs.FlagHashed },
		func(v *ipvs.VirtualServer) { v.PersistenceTimeout += 1 },
		func(v *ipvs.VirtualServer) { v.Flags ^= ipvs.FlagPersistent },
		func(v *ipvs.VirtualServer) { v.Flags ^= ipvs.FlagSchedSH1 },
		func(v *ipvs.VirtualServer) { v.Scheduler += "x" },
		func(v *ipvs.VirtualServer) { v.Scheduler = "rr" },
		func(v *ipvs.VirtualServer) { v.Service = portName("default/other:http") },
		func(v *ipvs.VirtualServer) {
			v.RealServers = append(v.RealServers, ipvs.RealServer{Address: ep3, Port: 9, Weight: 1})
		},
		func(v *ipvs.VirtualServer) {
			if len(v.RealServers) > 0 {
				v.RealServers = v.RealServers[1:]
			}
		},
		func(v *ipvs.VirtualServer) {
			if len(v.RealServers) > 0 {
				v.RealServers[0].Weight ^= 1
			}
		},
		func(v *ipvs.VirtualServer) {
			if len(v.RealServers) > 0 {
				v.RealServers[0].Port++
			}
		},
		func(v *ipvs.VirtualServer) {
			if len(v.RealServers) > 0 {
				v.RealServers[0].Address = addrs[rnd.IntN(len(addrs))]
			}
		},
	}
	same, differ := 0, 0
	for range 20000 {
		a := random()
		b := a
		b.RealServers = slices.Clone(a.RealServers)
		edits[rnd.IntN(len(edits))](&b)
		want := ipvs.SameService(a, b) && ipvs.SameRealServers(a.RealServers, b.RealServers) && ipvs.SameRealServers(b.RealServers, a.RealServers)
		if got := ipvs.DigestOf(&a) == ipvs.DigestOf(&b); got != want {
			t.Fatalf("digests equal = %v, the full sync's comparison %v:\n%+v\n%+v", got, want, a, b)
		}
		if want {
			same++
		} else {
			differ++
		}
	}
	if same < 2000 || differ < 2000 {
		t.Errorf("%d equal and %d different pairs: the cases do not cover both", same, differ)
	}
}

// TestDumpOfAnUnchangedTableIsEmpty: a read of a table the mirror holds
// exactly keeps nothing but the count, whatever order the kernel lists
// the real servers in; one drift and one deletion are all it keeps then.
func TestDumpOfAnUnchangedTableIsEmpty(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2, ep3)
	api := vs("default/api:http", model.TCP, vip, 81, ep1)
	dns := vs("default/dns:dns", model.UDP, vip, 53, ep1, ep2)
	mustFull(t, r, []ipvs.VirtualServer{web, api, dns}, own(vip))

	d, err := r.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Changed) != 0 || len(d.Missing) != 0 || d.Listed != 3 {
		t.Errorf("unchanged table: %+v, want only Listed 3", d)
	}
	if _, err := r.FullFrom(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{web, api, dns}, Own: own(vip)}, d, nil); err != nil {
		t.Fatal(err)
	}

	if err := ft.UpdateRealServer(web.Key, ipvs.RealServer{Address: ep2, Port: 8080, Weight: 0}); err != nil {
		t.Fatal(err)
	}
	if err := ft.DelService(api.Key); err != nil {
		t.Fatal(err)
	}
	d, err = r.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Changed) != 1 || d.Changed[0].Key != web.Key || len(d.Changed[0].RealServers) != 3 ||
		!slices.Equal(d.Missing, []ipvs.Key{api.Key}) || d.Listed != 2 {
		t.Errorf("after a reweight and a deletion: %+v", d)
	}
}
