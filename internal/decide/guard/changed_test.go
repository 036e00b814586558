package guard

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// TestChangedAddrsNamesEveryChangedVerdict draws pairs of guards that
// differ in their address sets and checks that every address of a pool
// that ChangedAddrs does not name gets the same verdict from both: a
// planner that replans only the services naming those addresses misses
// nothing.
func TestChangedAddrsNamesEveryChangedVerdict(t *testing.T) {
	pool := make([]netip.Addr, 0, 40)
	for i := range 32 {
		pool = append(pool, netip.AddrFrom4([4]byte{10, 0, byte(i / 8), byte(i%8 + 1)}))
	}
	pool = append(pool, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("10.0.0.255"), netip.MustParseAddr("10.0.1.0"))
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() []netip.Addr {
		var as []netip.Addr
		for range rng.IntN(4) {
			as = append(as, pool[rng.IntN(len(pool))])
		}
		return as
	}
	seen := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	draw := func() Inputs {
		in := Inputs{LocalAddrs: pick(), APIServers: pick(), Gateways: pick(), NextHops: pick(), Resolvers: pick(),
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.3.0/24")}, StrictARP: true}
		if rng.IntN(2) == 0 {
			in.LocalPrefixes = []netip.Prefix{netip.PrefixFrom(pool[rng.IntN(8)], 24), netip.PrefixFrom(pool[8+rng.IntN(8)], 31)}
		}
		for i := range rng.IntN(4) {
			n := model.Node{Name: string(rune('a' + rng.IntN(3))), Addresses: pick()}
			if i == 3 || rng.IntN(4) == 0 {
				n.LastSeen = seen.Add(time.Duration(rng.IntN(2)) * time.Minute)
			}
			in.Nodes = append(in.Nodes, n)
		}
		return in
	}
	named := 0
	for range 2000 {
		old, cur := draw(), draw()
		if rng.IntN(3) == 0 {
			// Only the Nodes change, as when one joins the cluster.
			cur = old
			cur.Nodes = draw().Nodes
		}
		g0, g1 := New(old), New(cur)
		addrs, ok := g1.ChangedAddrs(g0)
		if !ok {
			t.Fatalf("guards differing in address sets only: ChangedAddrs says everything may change")
		}
		if !slices.IsSortedFunc(addrs, netip.Addr.Compare) {
			t.Fatalf("ChangedAddrs %v not sorted", addrs)
		}
		named += len(addrs)
		for _, a := range pool {
			if slices.Contains(addrs, a) {
				continue
			}
			if v0, v1 := g0.Check(a), g1.Check(a); v0 != v1 {
				t.Fatalf("%s: verdict changed from %+v to %+v, but ChangedAddrs %v does not name it\nold %+v\nnew %+v", a, v0, v1, addrs, old, cur)
			}
		}
	}
	if named == 0 {
		t.Fatal("no pair of guards differed: the test checks nothing")
	}
}

func TestChangedAddrsOfPrefixesAndPorts(t *testing.T) {
	base := Inputs{Nodes: []model.Node{{Name: "n1", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}}}
	for name, change := range map[string]func(*Inputs){
		"protected CIDRs": func(in *Inputs) { in.ProtectedCIDRs = []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")} },
		"pod CIDRs":       func(in *Inputs) { in.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")} },
		"on-link subnets": func(in *Inputs) { in.LocalPrefixes = []netip.Prefix{netip.MustParsePrefix("192.168.1.5/24")} },
		"protected ports": func(in *Inputs) { in.ProtectedPorts = []model.PortRange{{First: 22, Last: 22}} },
		"listeners": func(in *Inputs) {
			in.Listeners = []model.Listener{{Protocol: model.TCP, Addr: netip.IPv4Unspecified(), Port: 22}}
		},
	} {
		in := base
		change(&in)
		if addrs, ok := New(in).ChangedAddrs(New(base)); ok {
			t.Errorf("%s changed: ChangedAddrs = %v, true; want false (any address may be answered differently)", name, addrs)
		}
	}
	same := base
	same.Nodes = []model.Node{{Name: "n1", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}}
	if addrs, ok := New(same).ChangedAddrs(New(base)); !ok || len(addrs) != 0 {
		t.Errorf("the same inputs: ChangedAddrs = %v, %v; want none, true", addrs, ok)
	}
}
