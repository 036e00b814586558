package ipvs_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// benchDesired is n TCP services of m real servers each, one ClusterIP
// virtual server per service and, for one in four, a NodePort one on the
// node's address; moved replaces the first real server of service moved
// (-1: none) by a new address.
func benchDesired(n, m, moved int) []ipvs.VirtualServer {
	out := make([]ipvs.VirtualServer, 0, n+n/4)
	for s := range n {
		svc := portName(fmt.Sprintf("default/svc-%05d:http", s))
		rss := make([]ipvs.RealServer, m)
		for e := range m {
			k := s*m + e
			a := netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)})
			if s == moved && e == 0 {
				a = netip.AddrFrom4([4]byte{10, 255, 255, 1})
			}
			rss[e] = ipvs.RealServer{Address: a, Port: 8080, Weight: 1}
		}
		vip := netip.AddrFrom4([4]byte{10, 96, byte(s >> 8), byte(s)})
		out = append(out, ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: vip, Port: 80}, Scheduler: "rr", Service: svc, RealServers: rss})
		if s%4 == 0 {
			out = append(out, ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: nodeIP, Port: uint16(30000 + s/4)}, Scheduler: "rr", Service: svc, RealServers: rss})
		}
	}
	return out
}

// BenchmarkPartial is Reconciler.Partial of one changed service (one real
// server added or restored, one quiesced, on its ClusterIP virtual server
// and, for service 0 mod 4, its NodePort one) among n, on the fake table:
// the reconciler's own cost, which should not grow with n.
func BenchmarkPartial(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			moved := n / 2
			base, next := benchDesired(n, 10, -1), benchDesired(n, 10, moved)
			svc := fmt.Sprintf("default/svc-%05d", moved)
			pick := func(d []ipvs.VirtualServer) []ipvs.VirtualServer {
				var out []ipvs.VirtualServer
				for _, vs := range d {
					if vs.Service == portName(svc+":http") {
						out = append(out, vs)
					}
				}
				return out
			}
			baseSel, nextSel := pick(base), pick(next)
			r := ipvs.NewReconciler(ipvstest.NewFakeTable(), ipvs.Options{})
			if res, err := r.Full(ipvs.Desired{VirtualServers: base, Own: own(nodeIP)}); err != nil || res.Err() != nil {
				b.Fatal(err, res.Err())
			}
			ch := changed(svc)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				sel := nextSel
				if i%2 == 1 {
					sel = baseSel
				}
				res, err := r.Partial(ipvs.Desired{VirtualServers: sel, Changed: ch})
				if err != nil || res.Err() != nil || res.Changes() == 0 {
					b.Fatal(err, res.Err(), res.Changes())
				}
			}
		})
	}
}
