package applier

import (
	"fmt"
	"math/rand"
	"net/netip"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestPartialIndexedMatchesPartial drives two appliers with the same
// incremental plan — services added, their endpoints, ports and VIPs
// changed (also onto another service's VIP), services removed, several per
// sync — one through Partial (the walk of the state), the other through
// PartialIndexed (the planner's index), and checks after every sync that
// both did the same changes and left the same IPVS table and addresses.
func TestPartialIndexedMatchesPartial(t *testing.T) {
	opts := planner.Options{NodeName: "node-0", LocalAddrs: []netip.Addr{nodeIP}, Scheduler: "rr",
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}, MasqueradeBit: planner.DefaultMasqueradeBit}
	r := rand.New(rand.NewSource(3))
	inc := planner.NewIncremental(opts, nil, nil)
	// Beds without newBed's order checks: services here share VIPs, so a
	// virtual server may go while its address stays for another's.
	plainBed := func() *bed {
		b := &bed{t: t, table: ipvstest.NewFakeTable(), link: addrmgrtest.NewFakeLink(), rules: &fakeRules{}}
		b.a = New(ipvs.NewReconciler(b.table, ipvs.Options{}), addrmgr.NewManager(b.link, setGuard{}, nil), b.rules, nil)
		return b
	}
	walk, indexed := plainBed(), plainBed()
	service := func(s int) ([]model.ServicePort, map[model.ServicePortName][]model.Endpoint) {
		key := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%d", s)}
		vip := netip.AddrFrom4([4]byte{10, 96, 0, byte(1 + r.Intn(12))})
		var ports []model.ServicePort
		eps := map[model.ServicePortName][]model.Endpoint{}
		for p := range 1 + r.Intn(2) {
			sp := model.ServicePort{Name: model.ServicePortName{NamespacedName: key, Port: fmt.Sprintf("p%d", p)}, Protocol: model.TCP,
				Port: uint16(80 + 363*p), ClusterIPs: []netip.Addr{vip}}
			for e := range r.Intn(4) {
				eps[sp.Name] = append(eps[sp.Name], model.Endpoint{Address: netip.AddrFrom4([4]byte{10, 244, byte(s), byte(r.Intn(4) + 4*e)}),
					Port: 8080, Ready: true, Serving: true})
			}
			ports = append(ports, sp)
		}
		return ports, eps
	}
	for s := range 10 {
		ports, eps := service(s)
		inc.Update(ports[0].Name.NamespacedName, ports, eps, nil)
	}
	st := inc.State()
	for _, b := range []*bed{walk, indexed} {
		if res, err := b.a.Full(&st, []netip.Addr{nodeIP}); err != nil {
			t.Fatal(err)
		} else if res.Err() != nil {
			t.Fatal(res.Err())
		}
	}
	for step := range 200 {
		var changed []types.NamespacedName
		for range 1 + r.Intn(3) {
			s := r.Intn(14)
			key := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%d", s)}
			if r.Intn(5) == 0 {
				inc.Update(key, nil, nil, nil)
			} else {
				ports, eps := service(s)
				inc.Update(key, ports, eps, nil)
			}
			changed = append(changed, key)
		}
		st := inc.State()
		rw, err := walk.a.Partial(&st, changed...)
		if err != nil {
			t.Fatal(err)
		}
		ri, err := indexed.a.PartialIndexed(&st, inc, changed...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(rw.IPVS, ri.IPVS) || rw.Bind.Bound != ri.Bind.Bound || rw.Unbind.Unbound != ri.Unbind.Unbound {
			t.Fatalf("step %d (%v): walk %+v bound %d unbound %d, indexed %+v bound %d unbound %d", step, changed,
				rw.IPVS, rw.Bind.Bound, rw.Unbind.Unbound, ri.IPVS, ri.Bind.Bound, ri.Unbind.Unbound)
		}
		if w, i := walk.table.String(), indexed.table.String(); w != i {
			t.Fatalf("step %d (%v): IPVS differs\n--- walk\n%s--- indexed\n%s", step, changed, w, i)
		}
		if w, i := walk.link.String(), indexed.link.String(); w != i {
			t.Fatalf("step %d (%v): addresses differ\n--- walk\n%s--- indexed\n%s", step, changed, w, i)
		}
	}
}
