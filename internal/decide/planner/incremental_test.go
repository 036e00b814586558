package planner

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// liveCluster is a cluster kept service by service, as the sync loop sees it.
type liveCluster struct {
	ports    map[types.NamespacedName][]model.ServicePort
	eps      map[types.NamespacedName]map[model.ServicePortName][]model.Endpoint
	refusals map[types.NamespacedName][]model.Refusal
	nodes    []model.Node
}

func newLiveCluster(nodes []model.Node) *liveCluster {
	return &liveCluster{ports: map[types.NamespacedName][]model.ServicePort{}, eps: map[types.NamespacedName]map[model.ServicePortName][]model.Endpoint{},
		refusals: map[types.NamespacedName][]model.Refusal{}, nodes: nodes}
}

func (l *liveCluster) set(key types.NamespacedName, ports []model.ServicePort, eps map[model.ServicePortName][]model.Endpoint, rs []model.Refusal) {
	if len(ports) == 0 && len(rs) == 0 {
		delete(l.ports, key)
		delete(l.eps, key)
		delete(l.refusals, key)
		return
	}
	l.ports[key], l.eps[key], l.refusals[key] = ports, eps, rs
}

// cluster is the whole model, for Plan.
func (l *liveCluster) cluster() model.Cluster {
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}, Nodes: l.nodes}
	keys := slices.SortedFunc(maps.Keys(l.ports), model.CompareServices)
	for _, k := range keys {
		c.Services = append(c.Services, l.ports[k]...)
		for n, e := range l.eps[k] {
			c.Endpoints[n] = e
		}
		c.Refusals = append(c.Refusals, l.refusals[k]...)
	}
	return c
}

// serviceOf is the ports of Service key in c, with their endpoints.
func serviceOf(c model.Cluster, key types.NamespacedName) ([]model.ServicePort, map[model.ServicePortName][]model.Endpoint) {
	var ports []model.ServicePort
	eps := map[model.ServicePortName][]model.Endpoint{}
	for _, sp := range c.Services {
		if sp.Name.NamespacedName == key {
			ports = append(ports, sp)
			eps[sp.Name] = c.Endpoints[sp.Name]
		}
	}
	return ports, eps
}

// sameState fails unless got is exactly want: the same values, the same
// nil-ness (reflect.DeepEqual), and the same text and JSON.
func sameState(t *testing.T, step string, got, want State) {
	t.Helper()
	var gt, wt, gj, wj bytes.Buffer
	_ = WriteText(&gt, got)
	_ = WriteText(&wt, want)
	_ = WriteJSON(&gj, got)
	_ = WriteJSON(&wj, want)
	if gt.String() != wt.String() || gj.String() != wj.String() {
		t.Fatalf("%s: incremental state differs from Plan\n--- incremental\n%s\n--- Plan\n%s", step, gt.String(), wt.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: incremental state equals Plan's in text but not in value:\n%#v\n%#v", step, got, want)
	}
}

// sameIncremental fails unless inc's State is exactly want, and its
// indexes are the state's: VirtualServersOf every Service is the state's
// virtual servers of that Service, in order, and RealServers their count.
func sameIncremental(t *testing.T, step string, inc *Incremental, want State) {
	t.Helper()
	got := inc.State()
	sameState(t, step, got, want)
	bySvc := map[types.NamespacedName][]ipvs.VirtualServer{}
	rs := 0
	for _, vs := range got.VirtualServers {
		bySvc[vs.Service.NamespacedName] = append(bySvc[vs.Service.NamespacedName], vs)
		rs += len(vs.RealServers)
	}
	for key := range inc.services {
		if of := inc.VirtualServersOf(key); !reflect.DeepEqual(of, bySvc[key]) {
			t.Fatalf("%s: VirtualServersOf(%s) = %v, the state has %v", step, key, of, bySvc[key])
		}
		delete(bySvc, key)
	}
	if len(bySvc) > 0 {
		t.Fatalf("%s: virtual servers of services the plan does not hold: %v", step, bySvc)
	}
	if inc.RealServers() != rs {
		t.Fatalf("%s: RealServers() = %d, the state has %d", step, inc.RealServers(), rs)
	}
}

// bytesFrom returns a source of random inputs of clusterFromBytes drawn
// from r.
func bytesFrom(r *rand.Rand) func() []byte {
	return func() []byte {
		b := make([]byte, 4+r.Intn(120))
		r.Read(b)
		return b
	}
}

// TestIncrementalMatchesPlan updates services one at a time in random
// order — new ports, new endpoints, conflicting addresses, refusals,
// removals — and checks after every update that the incremental state is
// exactly Plan's state of the whole cluster as it now is. The clusters are
// the fuzz test's: few names and few addresses, so that services often
// claim the same virtual server and win or lose it as others change.
func TestIncrementalMatchesPlan(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		randomBytes := bytesFrom(r)
		_, o := clusterFromBytes(randomBytes())
		live := newLiveCluster(testNodes)
		inc := NewIncremental(o, testNodes, nil)
		for step := 0; step < 40; step++ {
			c, _ := clusterFromBytes(randomBytes())
			key := types.NamespacedName{Namespace: "default", Name: string(rune('a' + r.Intn(4)))}
			ports, eps := serviceOf(c, key)
			var rs []model.Refusal
			if r.Intn(4) == 0 {
				rs = []model.Refusal{{Subject: model.ServiceSubject(key), Field: "spec.ports", Reason: model.ReasonInvalidField, Message: "conversion refusal " + strconv.Itoa(r.Intn(2))}}
			}
			if r.Intn(6) == 0 {
				ports, rs = nil, nil // removed
			}
			live.set(key, ports, eps, rs)
			inc.Update(key, ports, eps, rs)
			sameIncremental(t, fmt.Sprintf("seed %d step %d (%s, %d ports)", seed, step, key, len(ports)), inc, Plan(live.cluster(), o))
			if got, want := inc.NoLocalEndpoints(), PlanAll(live.cluster(), o).NoLocalEndpoints(); got != want {
				t.Errorf("seed %d step %d (%s): NoLocalEndpoints %+v, a full plan's %+v", seed, step, key, got, want)
			}
		}
	}
}

// TestIncrementalLarge changes the endpoints, ports and addresses of a few
// services of a large cluster at a time, and removes and restores some,
// checking against Plan after each batch.
func TestIncrementalLarge(t *testing.T) {
	c, o := benchCluster(1500, 4)
	live := newLiveCluster(c.Nodes)
	inc := NewIncremental(o, c.Nodes, nil)
	for _, sp := range c.Services {
		k := sp.Name.NamespacedName
		ports := []model.ServicePort{sp}
		eps := map[model.ServicePortName][]model.Endpoint{sp.Name: c.Endpoints[sp.Name]}
		live.set(k, ports, eps, nil)
		inc.Update(k, ports, eps, nil)
	}
	sameIncremental(t, "initial", inc, Plan(live.cluster(), o))
	r := rand.New(rand.NewSource(7))
	for batch := 0; batch < 25; batch++ {
		for n := 1 + r.Intn(5); n > 0; n-- {
			sp := c.Services[r.Intn(len(c.Services))]
			k := sp.Name.NamespacedName
			eps := slices.Clone(c.Endpoints[sp.Name])
			switch r.Intn(5) {
			case 0: // an endpoint changes address
				eps[0].Address = addr(fmt.Sprintf("10.200.%d.%d", r.Intn(256), r.Intn(256)))
			case 1: // an endpoint is not ready any more
				eps[1].Ready = false
			case 2: // the service takes another's externalIP (a conflict)
				sp.ExternalIPs = append(slices.Clone(sp.ExternalIPs), addr("203.0.0.0"))
			case 3: // removed
				live.set(k, nil, nil, nil)
				inc.Update(k, nil, nil, nil)
				continue
			case 4: // a NodePort
				sp.NodePort = uint16(30000 + r.Intn(5))
			}
			ports := []model.ServicePort{sp}
			m := map[model.ServicePortName][]model.Endpoint{sp.Name: eps}
			live.set(k, ports, m, nil)
			inc.Update(k, ports, m, nil)
		}
		sameIncremental(t, fmt.Sprintf("batch %d", batch), inc, Plan(live.cluster(), o))
	}
}

// TestIncrementalPatchesInPlace: a change that only replaces virtual
// servers (an endpoint changed) updates the last state's list in place; one
// that adds or removes a virtual server makes a new list and leaves the
// last state's as it was.
func TestIncrementalPatchesInPlace(t *testing.T) {
	c, o := benchCluster(200, 3)
	inc := NewIncremental(o, c.Nodes, nil)
	for _, sp := range c.Services {
		inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, c.Endpoints, nil)
	}
	st := inc.State()
	sp := c.Services[17]
	eps := slices.Clone(c.Endpoints[sp.Name])
	eps[0].Port++
	inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, map[model.ServicePortName][]model.Endpoint{sp.Name: eps}, nil)
	st2 := inc.State()
	if &st2.VirtualServers[0] != &st.VirtualServers[0] {
		t.Error("an endpoint change allocated a new list of virtual servers")
	}
	var before bytes.Buffer
	_ = WriteText(&before, st2)
	inc.Update(sp.Name.NamespacedName, nil, nil, nil) // removed: its virtual servers go
	st3 := inc.State()
	if len(st3.VirtualServers) >= len(st2.VirtualServers) || &st3.VirtualServers[0] == &st2.VirtualServers[0] {
		t.Fatalf("removal: %d virtual servers (was %d), same list %v", len(st3.VirtualServers), len(st2.VirtualServers),
			&st3.VirtualServers[0] == &st2.VirtualServers[0])
	}
	var after bytes.Buffer
	_ = WriteText(&after, st2)
	if after.String() != before.String() {
		t.Error("a removal rewrote the last state")
	}
}

// TestIncrementalKeepsNoModel checks that Update neither modifies nor
// keeps the ports and endpoints it is given.
func TestIncrementalKeepsNoModel(t *testing.T) {
	c, o := benchCluster(50, 3)
	inc := NewIncremental(o, c.Nodes, nil)
	before := fmt.Sprintf("%#v", c)
	for _, sp := range c.Services {
		inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, c.Endpoints, nil)
	}
	if fmt.Sprintf("%#v", c) != before {
		t.Fatal("Update modified its input")
	}
	want := inc.State()
	var wt bytes.Buffer
	_ = WriteText(&wt, want)
	for _, eps := range c.Endpoints {
		for i := range eps {
			eps[i].Port = 1
			eps[i].Ready = false
		}
	}
	var gt bytes.Buffer
	_ = WriteText(&gt, inc.State())
	if gt.String() != wt.String() {
		t.Fatal("the state changed with the caller's endpoints: the Incremental kept a reference")
	}
}
