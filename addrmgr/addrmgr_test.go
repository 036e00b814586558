package addrmgr_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// setGuard protects a fixed set of addresses.
type setGuard map[netip.Addr]model.Reason

func (g setGuard) Check(a netip.Addr) guard.Verdict {
	if r, ok := g[a]; ok {
		return guard.Verdict{Protected: true, Reason: r, Detail: "protected in test"}
	}
	return guard.Verdict{}
}

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func TestUnbindAndBind(t *testing.T) {
	nodeIP := netip.MustParseAddr("192.168.1.10")
	link := addrmgrtest.NewFakeLink(pfx("10.96.0.1/32", "10.96.0.99/32", "192.168.1.10/32", "10.0.0.0/24")...)
	m := addrmgr.NewManager(link, setGuard{nodeIP: model.ReasonNodeIP}, nil)
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	desired := pfx("10.96.0.1/32", "10.96.0.10/32", "fd00::a/128", "192.168.1.10/32")
	res := m.Unbind(desired)
	if res.Err() != nil || res.Unbound != 3 {
		t.Fatalf("unbind: %+v %v", res, res.Err())
	}
	if got, want := link.String(), "10.96.0.1/32\n"; got != want {
		t.Fatalf("after unbind:\n%s\nwant:\n%s", got, want)
	}
	res = m.Bind(desired, nil)
	if res.Err() != nil || res.Bound != 2 || len(res.Refused) != 1 || res.Refused[0].Reason != model.ReasonNodeIP {
		t.Fatalf("bind: %+v %v", res, res.Err())
	}
	if got, want := link.String(), "10.96.0.1/32\n10.96.0.10/32\nfd00::a/128\n"; got != want {
		t.Fatalf("after bind:\n%s\nwant:\n%s", got, want)
	}
	// Nothing to do the second time, and only one dump per sync.
	dumps, muts := link.Dumps, link.Mutations
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	if r := m.Unbind(desired); r.Unbound != 0 {
		t.Fatalf("second unbind: %+v", r)
	}
	if r := m.Bind(desired, nil); r.Bound != 0 {
		t.Fatalf("second bind: %+v", r)
	}
	if link.Dumps != dumps+1 || link.Mutations != muts {
		t.Fatalf("dumps %d->%d mutations %d->%d", dumps, link.Dumps, muts, link.Mutations)
	}
}

func TestProtectedAddedByHandIsRemoved(t *testing.T) {
	nodeIP := netip.MustParseAddr("192.168.1.10")
	link := addrmgrtest.NewFakeLink()
	m := addrmgr.NewManager(link, setGuard{nodeIP: model.ReasonNodeIP}, nil)
	desired := pfx("10.96.0.1/32")
	m.Dump()
	if m.Drift() != 0 {
		t.Errorf("first dump reported drift %d", m.Drift())
	}
	m.Unbind(desired)
	m.Bind(desired, nil)
	link.Put(netip.MustParsePrefix("192.168.1.10/32"))
	m.Dump()
	if m.Drift() != 1 {
		t.Errorf("drift %d, want 1 (the address added by hand)", m.Drift())
	}
	if r := m.Unbind(desired); r.Unbound != 1 {
		t.Fatalf("%+v", r)
	}
	if got := link.String(); got != "10.96.0.1/32\n" {
		t.Fatalf("got %q", got)
	}
	if m.Dump(); m.Drift() != 0 {
		t.Errorf("drift %d after the repair, want 0", m.Drift())
	}
	// Even a desired address is removed when the guard now protects it
	// (a new node took that IP).
	m2 := addrmgr.NewManager(link, setGuard{netip.MustParseAddr("10.96.0.1"): model.ReasonNodeIP}, nil)
	m2.Dump()
	if r := m2.Unbind(desired); r.Unbound != 1 || link.String() != "" {
		t.Fatalf("%+v %q", r, link.String())
	}
}

func TestGuardCheckedImmediatelyBeforeEachBatch(t *testing.T) {
	// The guard changes its mind between batches of binds: each address
	// must be asked about before it is bound, with the others of its
	// batch (bindBatch), not all of them before the first bind.
	link := addrmgrtest.NewFakeLink()
	g := &flipGuard{protected: map[netip.Addr]bool{}}
	var desired []netip.Prefix
	for i := range addrmgr.BindBatch + 1 {
		desired = append(desired, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), 32))
	}
	last := desired[addrmgr.BindBatch].Addr()
	link.OnAdd = func(p netip.Prefix) error {
		if !g.asked[p.Addr()] {
			return errors.New("bound without asking the guard first")
		}
		// Binding the first address makes the last one, in the next
		// batch, protected from now on.
		g.protected[last] = true
		return nil
	}
	m := addrmgr.NewManager(link, g, nil)
	res := m.Bind(desired, nil)
	if res.Err() != nil || res.Bound != addrmgr.BindBatch || len(res.Refused) != 1 || res.Refused[0].Prefix.Addr() != last {
		t.Fatalf("%+v %v", res, res.Err())
	}
}

type flipGuard struct {
	protected map[netip.Addr]bool
	asked     map[netip.Addr]bool
}

func (g *flipGuard) Check(a netip.Addr) guard.Verdict {
	if g.asked == nil {
		g.asked = map[netip.Addr]bool{}
	}
	g.asked[a] = true
	if g.protected[a] {
		return guard.Verdict{Protected: true, Reason: model.ReasonNodeIP, Detail: "now protected"}
	}
	return guard.Verdict{}
}

func TestBindRules(t *testing.T) {
	link := addrmgrtest.NewFakeLink()
	m := addrmgr.NewManager(link, setGuard{}, nil)
	res := m.Bind(pfx("10.96.0.0/24", "10.96.0.1/32", "10.96.0.2/32"), func(a netip.Addr) bool { return a != netip.MustParseAddr("10.96.0.2") })
	if res.Bound != 1 || len(res.Failures) != 2 || !errors.Is(res.Err(), addrmgr.ErrNotHost) {
		t.Fatalf("%+v %v", res, res.Err())
	}
	if !strings.Contains(res.Err().Error(), "bind 10.96.0.2/32 on kube-ipvs0") {
		t.Errorf("error text: %v", res.Err())
	}
}

// TestManagerWithRealGuard: a *guard.Guard as the Manager's Protector
// refuses what it protects and binds the rest.
func TestManagerWithRealGuard(t *testing.T) {
	node := netip.MustParseAddr("192.168.1.10")
	g := guard.New(guard.Inputs{LocalAddrs: []netip.Addr{node}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
	for _, pr := range []addrmgr.Protector{g} {
		link := addrmgrtest.NewFakeLink()
		if err := link.AddAddr(netip.MustParsePrefix("192.168.1.10/32")); err != nil {
			t.Fatal(err)
		}
		m := addrmgr.NewManager(link, pr, nil)
		if _, err := m.Dump(); err != nil {
			t.Fatal(err)
		}
		if res := m.Unbind(pfx("10.96.0.1/32", "192.168.1.10/32")); res.Unbound != 1 {
			t.Fatalf("unbind of a protected address: %+v", res)
		}
		res := m.Bind(pfx("10.96.0.1/32", "10.244.0.5/32", "192.168.1.10/32"), nil)
		if res.Err() != nil || res.Bound != 1 || len(res.Refused) != 2 {
			t.Fatalf("%+v %v", res, res.Err())
		}
		if got := link.String(); got != "10.96.0.1/32\n" {
			t.Fatalf("bound %q", got)
		}
	}
}

// TestExcludedAddressesStay: an address inside --ipvs-exclude-cidrs that
// the proxy does not want stays on kube-ipvs0, as kube-proxy leaves it
// (another agent may bind its VIPs there); a protected one inside goes all
// the same, and so does a wider prefix (issue 14, item 13).
func TestExcludedAddressesStay(t *testing.T) {
	nodeIP := netip.MustParseAddr("10.1.0.9")
	link := addrmgrtest.NewFakeLink(pfx("10.1.0.5/32", "10.1.0.9/32", "10.1.7.0/24", "10.96.0.99/32", "fd00:1::5/128")...)
	m := addrmgr.NewManager(link, setGuard{nodeIP: model.ReasonNodeIP}, nil)
	m.SetExclude(pfx("10.1.0.0/16", "fd00:1::/64"))
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	desired := pfx("10.96.0.1/32")
	var gone []string
	for _, u := range m.Unwanted(desired) {
		gone = append(gone, u.Prefix.String())
	}
	if want := "10.1.0.9/32 10.1.7.0/24 10.96.0.99/32"; strings.Join(gone, " ") != want {
		t.Errorf("unwanted %v, want %s", gone, want)
	}
	m.Unbind(desired)
	m.Bind(desired, nil)
	if got, want := link.String(), "10.1.0.5/32\n10.96.0.1/32\nfd00:1::5/128\n"; got != want {
		t.Errorf("kube-ipvs0:\n%s\nwant:\n%s", got, want)
	}
}
