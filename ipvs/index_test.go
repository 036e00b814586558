package ipvs_test

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// checkIndex fails unless the service index is exactly the mirror's keys
// filed under their services' names, and every cached digest is current.
func checkIndex(t *testing.T, r *ipvs.Reconciler) {
	t.Helper()
	want := ipvs.ServiceIndex{}
	for _, k := range slices.SortedFunc(maps.Keys(r.Mirror()), ipvs.CompareKeys) {
		want.Move(k, model.ServicePortName{}, r.Mirror()[k].Service())
	}
	sorted := func(ks []ipvs.Key) []ipvs.Key { return slices.SortedFunc(slices.Values(ks), ipvs.CompareKeys) }
	if !maps.EqualFunc(r.ByService(), want, func(a, b []ipvs.Key) bool { return slices.Equal(sorted(a), b) }) {
		t.Fatalf("service index %v, the mirror files %v", r.ByService(), want)
	}
	// And every mirror entry's cached digest is its own; computed now, so
	// that the next step's changes must clear it.
	for k, m := range r.Mirror() {
		if vs := m.VS(); m.Summed() && m.Sum() != ipvs.DigestOf(&vs) {
			t.Fatalf("%v: the cached digest is of an older %+v", k, m.VS())
		}
		m.Digest()
	}
}

// indexFuzzServices are the names a fuzzed change picks from: three
// Services of two ports each, by Service key and by port name.
var indexFuzzServices = []string{"ns/a", "ns/b", "ns/c", "ns/a:x", "ns/a:y", "ns/b:x", "ns/b:y", "ns/c:x", "ns/c:y"}

// fuzzDesired decodes desired virtual servers from data: each of the six
// ports asks, or not, for one of four keys (so ports of several Services
// compete for a key and a key changes hands), with one of two real-server
// sets and schedulers. The first port to ask for a key gets it, as the
// planner's duplicate resolution gives one winner.
func fuzzDesired(data []byte) []ipvs.VirtualServer {
	keys := []ipvs.Key{
		{Protocol: model.TCP, Address: vip, Port: 80}, {Protocol: model.TCP, Address: vip, Port: 443},
		{Protocol: model.UDP, Address: vip, Port: 53}, {Protocol: model.TCP, Address: nodeIP, Port: 30080},
	}
	var out []ipvs.VirtualServer
	taken := map[ipvs.Key]bool{}
	for i, svc := range indexFuzzServices[3:] {
		if i >= len(data) || data[i]&1 == 0 {
			continue
		}
		b := data[i]
		k := keys[int(b>>1)%len(keys)]
		if taken[k] {
			continue
		}
		taken[k] = true
		eps := []netip.Addr{ep1}
		if b&8 != 0 {
			eps = []netip.Addr{ep2, ep3}
		}
		v := vs(svc, k.Protocol, k.Address, k.Port, eps...)
		if b&16 != 0 {
			v.Scheduler = "sh"
		}
		out = append(out, v)
	}
	return out
}

// FuzzPartialIndex drives a Reconciler through fuzzed Full and Partial
// syncs, virtual servers deleted behind its back and deletions the kernel
// refuses, and checks after each step that the service index is the
// mirror's, and after each Partial that no mirrored virtual server of a
// changed service is left that the sync does not want (what the walk of
// the whole mirror the index replaced guaranteed).
func FuzzPartialIndex(f *testing.F) {
	f.Add([]byte{0, 1, 3, 5, 7, 9, 11, 1, 2, 0x11, 0x13, 0, 0, 0, 0, 2, 1, 1, 4, 3, 0x1f, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 3, 3, 3, 3, 3, 3, 1, 0, 5, 0, 0, 0, 0, 0, 1, 3, 9, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		ft := ipvstest.NewFakeTable()
		refuse := map[ipvs.Key]bool{}
		ft.Fail = func(op string, k ipvs.Key) error {
			if op == "DelService" && refuse[k] {
				return errors.New("refused")
			}
			return nil
		}
		r := ipvs.NewReconciler(ft, ipvs.Options{})
		next := func(n int) []byte {
			if len(data) < n {
				n = len(data)
			}
			b := data[:n]
			data = data[n:]
			return b
		}
		if _, err := r.Full(ipvs.Desired{VirtualServers: fuzzDesired(next(6)), Own: own(vip)}); err != nil {
			t.Fatal(err)
		}
		checkIndex(t, r)
		for len(data) > 0 {
			op := next(1)[0]
			switch op % 4 {
			case 0:
				if _, err := r.Full(ipvs.Desired{VirtualServers: fuzzDesired(next(6)), Own: own(vip)}); err != nil {
					t.Fatal(err)
				}
			case 1:
				var names []string
				for _, b := range next(2) {
					names = append(names, indexFuzzServices[int(b)%len(indexFuzzServices)])
				}
				desired := fuzzDesired(next(6))
				res, err := r.Partial(ipvs.Desired{VirtualServers: desired, Changed: changed(names...)})
				if err != nil {
					t.Fatal(err)
				}
				match := ipvs.NewChangedSet(changed(names...)).Has
				want := map[ipvs.Key]bool{}
				for _, d := range desired {
					if match(d.Service) {
						want[d.Key] = true
					}
				}
				for _, fl := range res.Failures {
					want[fl.ID.Key] = true // a refused deletion stays mirrored
				}
				for k, m := range r.Mirror() {
					if match(m.Service()) && !want[k] {
						t.Fatalf("Partial(%v) left %v of %s in the mirror", names, k, m.Service())
					}
				}
			case 2:
				// Deleted behind the reconciler's back.
				ks := slices.SortedFunc(maps.Keys(r.Mirror()), ipvs.CompareKeys)
				if b := next(1); len(b) > 0 && len(ks) > 0 {
					_ = ft.DelService(ks[int(b[0])%len(ks)])
				}
			case 3:
				ks := slices.SortedFunc(maps.Keys(r.Mirror()), ipvs.CompareKeys)
				if b := next(1); len(b) > 0 && len(ks) > 0 {
					k := ks[int(b[0])%len(ks)]
					refuse[k] = !refuse[k]
				}
			}
			checkIndex(t, r)
		}
	})
}

// TestPartialIndexMovesService: a virtual server that changes hands goes
// with its new Service, and a partial sync of the old one leaves it.
func TestPartialIndexMovesService(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	a := vs("ns/a:x", model.TCP, vip, 80, ep1)
	mustFull(t, r, []ipvs.VirtualServer{a}, own(vip))
	b := vs("ns/b:x", model.TCP, vip, 80, ep2)
	if _, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{b}, Changed: changed("ns/b")}); err != nil {
		t.Fatal(err)
	}
	checkIndex(t, r)
	res, err := r.Partial(ipvs.Desired{VirtualServers: nil, Changed: changed("ns/a")})
	if err != nil || res.ServicesDeleted != 0 || !r.Has(b.Key) {
		t.Fatalf("a partial sync of ns/a deleted ns/b's virtual server: %v %+v", err, res)
	}
	res, err = r.Partial(ipvs.Desired{VirtualServers: nil, Changed: changed("ns/b:x")})
	if err != nil || res.ServicesDeleted != 1 || r.Has(b.Key) {
		t.Fatalf("a partial sync of ns/b:x kept its virtual server: %v %+v", err, res)
	}
	checkIndex(t, r)
	if got := fmt.Sprint(r.ByService()); got != "map[]" {
		t.Errorf("index after the last deletion: %s", got)
	}
}
