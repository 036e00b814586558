package applier

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

type setGuard map[netip.Addr]bool

func (g setGuard) Check(a netip.Addr) guard.Verdict {
	if g[a] {
		return guard.Verdict{Protected: true, Reason: model.ReasonNodeIP, Detail: "node address"}
	}
	return guard.Verdict{}
}

// fakeRules holds the last applied state. Its read beside the loop reads
// nothing, and its FullFrom is a Full.
type fakeRules struct {
	sets  []iptables.IPSet
	fulls int
	err   error
}

// result is a sync's Result: err as its failure.
func (f *fakeRules) result() (*iptables.Result, error) {
	res := &iptables.Result{}
	if f.err != nil {
		res.Fail(iptables.PartSync, f.err)
	}
	return res, nil
}

func (f *fakeRules) Partial(d iptables.Desired) (*iptables.Result, error) {
	if f.err == nil {
		f.sets = d.Sets
	}
	return f.result()
}

func (f *fakeRules) Full(d iptables.Desired) (*iptables.Result, error) {
	f.fulls++
	return f.Partial(d)
}

func (f *fakeRules) Cleanup(iptables.Desired) (*iptables.Result, error) {
	if f.err != nil {
		res := &iptables.Result{}
		res.Fail(iptables.PartCleanup, f.err)
		return res, nil
	}
	f.sets = nil
	return &iptables.Result{}, nil
}

func (f *fakeRules) BeginFull() func() (*iptables.Readback, error) {
	return func() (*iptables.Readback, error) { return nil, nil }
}

func (f *fakeRules) FullFrom(d iptables.Desired, _ *iptables.Readback, _ layer.Turn[iptables.Desired]) (*iptables.Result, error) {
	return f.Full(d)
}

var (
	nodeIP = netip.MustParseAddr("192.168.1.10")
	ep1    = netip.MustParseAddr("10.244.1.5")
)

func service(name string, vip string, ports ...uint16) ([]ipvs.VirtualServer, netip.Prefix) {
	a := netip.MustParseAddr(vip)
	var out []ipvs.VirtualServer
	for _, p := range ports {
		out = append(out, ipvs.VirtualServer{
			Key:         ipvs.Key{Protocol: model.TCP, Address: a, Port: p},
			Scheduler:   "rr",
			Service:     model.ServicePortName{NamespacedName: svcName(name), Port: fmt.Sprintf("p%d", p)},
			RealServers: []ipvs.RealServer{{Address: ep1, Port: 8080, Weight: 1}},
		})
	}
	return out, netip.PrefixFrom(a, a.BitLen())
}

func state(svcs ...string) *planner.State {
	st := &planner.State{}
	for _, s := range svcs {
		name, vip, _ := strings.Cut(s, "=")
		vss, p := service(name, vip, 80, 443)
		st.VirtualServers = append(st.VirtualServers, vss...)
		st.Addresses = append(st.Addresses, p)
	}
	st.IPSets = []iptables.IPSet{{Name: "KUBE-CLUSTER-IP", Type: "hash:ip,port"}}
	return st
}

type bed struct {
	t     *testing.T
	table *ipvstest.FakeTable
	link  *addrmgrtest.FakeLink
	rules *fakeRules
	a     *Applier
}

func newBed(t *testing.T, g setGuard) *bed {
	b := &bed{t: t, table: ipvstest.NewFakeTable(), link: addrmgrtest.NewFakeLink(), rules: &fakeRules{}}
	// Order checks, on the state at the moment of each change.
	b.link.OnAdd = func(p netip.Prefix) error {
		if !strings.Contains(b.table.String(), "-A -t "+netip.AddrPortFrom(p.Addr(), 80).String()) {
			t.Errorf("%s bound before its virtual servers exist", p)
		}
		if b.rules.sets == nil {
			t.Errorf("%s bound before the ipsets were applied", p)
		}
		return nil
	}
	b.table.Fail = func(op string, k ipvs.Key) error {
		if op == "DelService" && strings.Contains(b.link.String(), k.Address.String()+"/") {
			t.Errorf("virtual server %s deleted while its address is still bound", k)
		}
		return nil
	}
	r := ipvs.NewReconciler(b.table, ipvs.Options{})
	b.a = New(r, addrmgr.NewManager(b.link, g, nil), b.rules, nil)
	return b
}

func TestFullThenPartialInOrder(t *testing.T) {
	b := newBed(t, setGuard{})
	res, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), []netip.Addr{nodeIP})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if got := b.link.String(); got != "10.96.0.1/32\n10.96.0.2/32\n" {
		t.Fatalf("addresses %q", got)
	}
	if res.IPVS.ServicesAdded != 4 || res.Bind.Bound != 2 {
		t.Fatalf("%+v %+v", res.IPVS, res.Bind)
	}
	// Service b deleted: unbind, then delete its virtual servers.
	res, err = b.a.Partial(state("ns/a=10.96.0.1"), svcNames("ns/b")...)
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if got := b.link.String(); got != "10.96.0.1/32\n" || res.IPVS.ServicesDeleted != 2 {
		t.Fatalf("addresses %q, %+v", got, res.IPVS)
	}
	if strings.Contains(b.table.String(), "10.96.0.2") {
		t.Fatalf("b left in IPVS:\n%s", b.table)
	}
}

func TestRestartAdoptsAndCleans(t *testing.T) {
	b := newBed(t, setGuard{})
	if _, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), []netip.Addr{nodeIP}); err != nil {
		t.Fatal(err)
	}
	// A foreign virtual server on another address, added by hand.
	if err := b.table.AddService(ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("192.168.1.200"), Port: 443}, Scheduler: "wlc"}); err != nil {
		t.Fatal(err)
	}
	// Restart: a new applier over the same kernel, where b is gone.
	mut := b.table.Mutations
	r := ipvs.NewReconciler(b.table, ipvs.Options{})
	a2 := New(r, addrmgr.NewManager(b.link, setGuard{}, nil), b.rules, nil)
	res, err := a2.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), []netip.Addr{nodeIP})
	if err != nil || res.Err() != nil || res.IPVS.Changes() != 0 || b.table.Mutations != mut || res.Bind.Bound+res.Unbind.Unbound != 0 {
		t.Fatalf("restart over the same state changed things: %+v %v", res.IPVS, err)
	}
	res, err = a2.Full(state("ns/a=10.96.0.1"), []netip.Addr{nodeIP})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if res.IPVS.ServicesDeleted != 2 || !strings.Contains(b.table.String(), "-A -t 192.168.1.200:443 -s wlc") {
		t.Fatalf("%+v\n%s", res.IPVS, b.table)
	}
}

func TestFailuresPerService(t *testing.T) {
	b := newBed(t, setGuard{netip.MustParseAddr("10.96.0.3"): true})
	boom := errors.New("boom")
	old := b.table.Fail
	b.table.Fail = func(op string, k ipvs.Key) error {
		if op == "AddService" && k.Address == netip.MustParseAddr("10.96.0.2") && k.Port == 443 {
			return boom
		}
		return old(op, k)
	}
	res, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2", "ns/c=10.96.0.3"), []netip.Addr{nodeIP})
	if err != nil {
		t.Fatal(err)
	}
	// b:p443 failed, so b's address is not bound (b:p80 is marked too); c
	// is refused by the guard (not a failure); a is fine.
	if got := joinNames(res.FailedServices()); got != "ns/b:p443,ns/b:p80" {
		t.Fatalf("failed services %q: %v", got, res.Err())
	}
	if !errors.Is(res.Err(), boom) {
		t.Fatalf("err %v", res.Err())
	}
	if got := b.link.String(); got != "10.96.0.1/32\n" {
		t.Fatalf("addresses %q", got)
	}
	if len(res.Bind.Refused) != 1 || res.Bind.Refused[0].Prefix.Addr() != netip.MustParseAddr("10.96.0.3") {
		t.Fatalf("refused %+v", res.Bind.Refused)
	}
	// Rules failing is reported, and the rest still applied.
	b.table.Fail = old
	b.rules.err = errors.New("iptables-restore: exit 1")
	res, err = b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), []netip.Addr{nodeIP})
	if err != nil || res.RulesErr == nil || res.IPVS.Err() != nil {
		t.Fatalf("%v %v %v", err, res.RulesErr, res.IPVS.Err())
	}
}

func TestFullRepairsRulesPartialDoesNot(t *testing.T) {
	b := newBed(t, setGuard{})
	if _, err := b.a.Full(state("ns/a=10.96.0.1"), []netip.Addr{nodeIP}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.a.Partial(state("ns/a=10.96.0.1"), svcNames("ns/a")...); err != nil {
		t.Fatal(err)
	}
	if b.rules.fulls != 1 {
		t.Fatalf("rules Full called %d times for one full and one partial sync, want 1", b.rules.fulls)
	}
}

func TestCleanupLeavesForeign(t *testing.T) {
	b := newBed(t, setGuard{})
	if _, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), []netip.Addr{nodeIP}); err != nil {
		t.Fatal(err)
	}
	foreign := ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("192.168.1.200"), Port: 443}, Scheduler: "wlc"}
	if err := b.table.AddService(foreign); err != nil {
		t.Fatal(err)
	}
	// A NodePort server of an earlier run: on a node address, in the range.
	np := ipvs.VirtualServer{Key: ipvs.Key{Protocol: model.TCP, Address: nodeIP, Port: 30080}, Scheduler: "rr"}
	if err := b.table.AddService(np); err != nil {
		t.Fatal(err)
	}
	res, err := b.a.Cleanup(&planner.State{}, []netip.Addr{nodeIP})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if got := b.table.String(); got != "-A -t 192.168.1.200:443 -s wlc\n" {
		t.Fatalf("after cleanup:\n%s", got)
	}
	if got := b.link.String(); got != "" || res.Unbind.Unbound != 2 || b.rules.sets != nil {
		t.Fatalf("addresses %q, %+v, sets %v", got, res.Unbind, b.rules.sets)
	}
}

// TestDumpBudget: the hot path reads the kernel once per layer at most. A
// full sync dumps IPVS once and kube-ipvs0 once, whatever the number of
// services; a partial sync dumps kube-ipvs0 once and IPVS never.
func TestDumpBudget(t *testing.T) {
	b := newBed(t, setGuard{})
	var svcs []string
	for i := range 50 {
		svcs = append(svcs, fmt.Sprintf("ns/s%d=10.96.1.%d", i, i+1))
	}
	st := state(svcs...)
	if _, err := b.a.Full(st, []netip.Addr{nodeIP}); err != nil {
		t.Fatal(err)
	}
	if b.table.Dumps != 1 || b.link.Dumps != 1 {
		t.Fatalf("full sync of 50 services: %d IPVS dumps, %d address dumps; want 1 and 1", b.table.Dumps, b.link.Dumps)
	}
	st.VirtualServers[7].RealServers = append(st.VirtualServers[7].RealServers, ipvs.RealServer{Address: netip.MustParseAddr("10.244.9.9"), Port: 8080, Weight: 1})
	res, err := b.a.Partial(st, st.VirtualServers[7].Service.NamespacedName)
	if err != nil || res.IPVS.RealServersAdded != 1 {
		t.Fatalf("%v %+v", err, res.IPVS)
	}
	if b.table.Dumps != 1 || b.link.Dumps != 2 {
		t.Fatalf("partial sync: %d IPVS dumps, %d address dumps in total; want 1 and 2", b.table.Dumps, b.link.Dumps)
	}
	if _, err := b.a.Full(st, []netip.Addr{nodeIP}); err != nil || b.table.Dumps != 2 || b.link.Dumps != 3 {
		t.Fatalf("second full sync: %v, %d IPVS dumps, %d address dumps in total", err, b.table.Dumps, b.link.Dumps)
	}
}

// kill -9 between a sync's unbind and the deletion of the virtual servers
// on the unbound address (simulated: DelService never happens). A restarted
// applier with the same ownership journal deletes them; without a journal
// they would stay foreign forever.
func TestRestartAfterKillBetweenUnbindAndDelete(t *testing.T) {
	for _, withJournal := range []bool{true, false} {
		b := newBed(t, setGuard{})
		dir := t.TempDir()
		opts := ipvs.Options{}
		if withJournal {
			opts.Journal = ipvs.NewFileJournal(dir)
		}
		b.a = New(ipvs.NewReconciler(b.table, opts), addrmgr.NewManager(b.link, setGuard{}, nil), b.rules, nil)
		if res, err := b.a.Full(state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), []netip.Addr{nodeIP}); err != nil || res.Err() != nil {
			t.Fatal(err, res.Err())
		}
		b.table.Fail = func(op string, k ipvs.Key) error {
			if op == "DelService" {
				return errors.New("killed")
			}
			return nil
		}
		if res, err := b.a.Partial(state("ns/a=10.96.0.1"), svcNames("ns/b")...); err != nil || res.Err() == nil {
			t.Fatalf("the simulated kill did not stop the deletion: %v", err)
		}
		if got := b.link.String(); got != "10.96.0.1/32\n" {
			t.Fatalf("addresses %q", got)
		}
		b.table.Fail = nil
		a2 := New(ipvs.NewReconciler(b.table, opts), addrmgr.NewManager(b.link, setGuard{}, nil), b.rules, nil)
		if res, err := a2.Full(state("ns/a=10.96.0.1"), []netip.Addr{nodeIP}); err != nil || res.Err() != nil {
			t.Fatal(err, res.Err())
		}
		leaked := strings.Contains(b.table.String(), "10.96.0.2")
		if leaked == withJournal {
			t.Errorf("journal %v: virtual servers of the unbound address left = %v\n%s", withJournal, leaked, b.table)
		}
		if withJournal {
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Errorf("journal not removed once nothing is unrecognisable: %v", left)
			}
		}
	}
}

// With the address manager watching kube-ipvs0, a partial sync does not
// dump it unless someone else changed it: a protected address added by
// hand kicks, and the next partial sync — even one with no changed
// service — dumps and removes it.
func TestWatchedPartialSyncs(t *testing.T) {
	b := newBed(t, setGuard{nodeIP: true})
	mgr := addrmgr.NewManager(b.link, setGuard{nodeIP: true}, nil)
	kicks := make(chan struct{}, 1)
	if err := mgr.Watch(t.Context(), func() {
		select {
		case kicks <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	b.a = New(ipvs.NewReconciler(b.table, ipvs.Options{}), mgr, b.rules, nil)
	st := state("ns/a=10.96.0.1", "ns/b=10.96.0.2")
	if res, err := b.a.Full(st, []netip.Addr{nodeIP}); err != nil || res.Err() != nil || !res.AddressesDumped {
		t.Fatal(err, res.Err())
	}
	dumps := b.link.Dumps
	for i, st := range []*planner.State{state("ns/a=10.96.0.1"), state("ns/a=10.96.0.1", "ns/b=10.96.0.2"), state("ns/a=10.96.0.1", "ns/b=10.96.0.2", "ns/c=10.96.0.3")} {
		b.link.Flush()
		res, err := b.a.Partial(st, svcNames("ns/b", "ns/c")...)
		if err != nil || res.Err() != nil || res.AddressesDumped || b.link.Dumps != dumps {
			t.Fatalf("partial %d: %v %v, dumped %v", i, err, res.Err(), res.AddressesDumped)
		}
	}
	if got := b.link.String(); got != "10.96.0.1/32\n10.96.0.2/32\n10.96.0.3/32\n" {
		t.Fatalf("addresses %q", got)
	}
	select {
	case <-kicks:
		t.Fatal("own changes kicked")
	default:
	}
	b.link.Put(netip.PrefixFrom(nodeIP, 32))
	b.link.Flush()
	select {
	case <-kicks:
	default:
		t.Fatal("no kick for a protected address added by hand")
	}
	tbl := b.table.String()
	st = state("ns/a=10.96.0.1", "ns/b=10.96.0.2", "ns/c=10.96.0.3")
	res, err := b.a.Partial(st)
	if err != nil || res.Err() != nil || !res.AddressesDumped || res.Unbind.Unbound != 1 || res.Drift[addrmgr.DriftAddress] != 1 {
		t.Fatalf("%v %v %+v %+v", err, res.Err(), res, res.Unbind)
	}
	if got := b.link.String(); strings.Contains(got, nodeIP.String()) {
		t.Fatalf("protected address left: %q", got)
	}
	if b.table.String() != tbl || res.IPVS.Changes() != 0 {
		t.Fatalf("a sync with no changed service changed IPVS: %+v", res.IPVS)
	}
	b.link.Flush()
	if res, _ := b.a.Partial(st); res.AddressesDumped {
		t.Fatal("dumped again after the repair")
	}
}

// svcName reads "namespace/name" as tests write Services.
func svcName(s string) types.NamespacedName {
	ns, name, _ := strings.Cut(s, "/")
	return types.NamespacedName{Namespace: ns, Name: name}
}

// svcNames is svcName of each.
func svcNames(ss ...string) []types.NamespacedName {
	out := make([]types.NamespacedName, len(ss))
	for i, s := range ss {
		out[i] = svcName(s)
	}
	return out
}

// joinNames joins service port names with commas.
func joinNames(ns []model.ServicePortName) string {
	ss := make([]string, len(ns))
	for i, n := range ns {
		ss[i] = n.String()
	}
	return strings.Join(ss, ",")
}
