//go:build kernel

package applier

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelAddressWatch: the address manager follows kube-ipvs0 through
// its RTM_NEWADDR/RTM_DELADDR subscription (`ip monitor address dev
// kube-ipvs0`). Partial syncs binding and unbinding IPv4 and IPv6 VIPs
// never dump kube-ipvs0 and never kick; an address put there or removed by
// hand kicks, and the next partial sync — with no changed service — dumps
// kube-ipvs0 and repairs it.
func TestKernelAddressWatch(t *testing.T) {
	b := newKBed(t)
	c := testCluster()
	st := b.plan(c)
	p := b.open(ipvs.Options{})
	b.full(p, st)
	// The full sync's own binds (and their IPv6 notifications, which the
	// kernel sends from its DAD work, later) must not kick.
	time.Sleep(500 * time.Millisecond)
	noKick := func(when string) {
		t.Helper()
		select {
		case <-p.kicks:
			t.Fatalf("%s: the watch kicked for the proxy's own changes", when)
		default:
		}
	}
	noKick("after the full sync")
	dumps := p.link.Dumps()
	// The watch started followed; kube-ipvs0's own addresses say nothing
	// of the other links.
	if got := drain(p.others); !slices.Equal(got, []bool{false}) {
		t.Fatalf("other links after the full sync: %v, want one start (false)", got)
	}

	// Services with dual-stack ClusterIPs come and go, by partial syncs.
	with := func(n int) model.Cluster {
		c2 := testCluster()
		for i := range n {
			sp := port(fmt.Sprintf("extra-%02d", i), "", model.TCP, 80)
			sp.ClusterIPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 96, 1, byte(i + 1)}), netip.MustParseAddr(fmt.Sprintf("fd00:96::1:%x", i+1))}
			c2.Services = append(c2.Services, sp)
			c2.Endpoints[sp.Name] = eps(thisNode, ktest.BackendPort, v4.podA, v6.podA)
		}
		return c2
	}
	var changed []string
	for i := range 10 {
		changed = append(changed, fmt.Sprintf("default/extra-%02d", i))
	}
	for round, n := range []int{10, 3, 10, 0, 7} {
		st2 := b.plan(with(n))
		res := b.partial(p, st2, changed...)
		if res.AddressesDumped || res.Bind.Bound+res.Unbind.Unbound == 0 {
			t.Fatalf("round %d: dumped %v, bound %d, unbound %d", round, res.AddressesDumped, res.Bind.Bound, res.Unbind.Unbound)
		}
		b.checkPlan(st2)
	}
	time.Sleep(500 * time.Millisecond)
	noKick("after the partial syncs")
	if got := drain(p.others); len(got) != 0 {
		t.Fatalf("binds on kube-ipvs0 reported as other links' changes: %v", got)
	}
	// An address of another link (the node's own, here on lo) comes and
	// goes: reported, for the node-address cache; kube-ipvs0 not kicked.
	for _, op := range []string{"add", "del"} {
		b.node.Run(t, "ip", "addr", op, "192.0.2.77/32", "dev", "lo")
		select {
		case lost := <-p.others:
			if lost {
				t.Fatalf("ip addr %s on lo: reported as lost events", op)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ip addr %s on lo: not reported", op)
		}
	}
	time.Sleep(200 * time.Millisecond)
	noKick("after another link's address changes")
	res := b.partial(p, st, changed...)
	if res.AddressesDumped || p.link.Dumps() != dumps {
		t.Fatalf("own binds and unbinds made %d kube-ipvs0 dumps (dumped %v)", p.link.Dumps()-dumps, res.AddressesDumped)
	}
	b.checkPlan(st)
	t.Logf("%d partial syncs binding and unbinding 20 addresses: no kube-ipvs0 dump", 6)

	// Protected addresses put on kube-ipvs0 by hand: the node's own.
	for _, a := range []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6} {
		hand := hostPrefix(a)
		b.handAdded = append(b.handAdded, hand)
		b.node.Run(t, "ip", "addr", "add", hand.String(), "dev", addrmgr.Device)
		p.waitKick(t, "protected "+hand.String()+" added by hand")
		res := b.partial(p, st)
		if !res.AddressesDumped || res.Unbind.Unbound != 1 || res.Drift[addrmgr.DriftAddress] != 1 || slices.Contains(b.kubeIPVS0(), hand.String()) {
			t.Fatalf("%s added by hand: dumped %v, unbound %d, drift %d, kube-ipvs0 %v", hand, res.AddressesDumped, res.Unbind.Unbound, res.Drift[addrmgr.DriftAddress], b.kubeIPVS0())
		}
		b.checkPlan(st)
		settle(t, b, p)
	}
	// A VIP removed by hand is bound again.
	vip := hostPrefix(v6.web)
	b.node.Run(t, "ip", "addr", "del", vip.String(), "dev", addrmgr.Device)
	p.waitKick(t, vip.String()+" removed by hand")
	res = b.partial(p, st)
	if !res.AddressesDumped || res.Bind.Bound != 1 {
		t.Fatalf("%s removed by hand: dumped %v, bound %d", vip, res.AddressesDumped, res.Bind.Bound)
	}
	b.checkPlan(st)
	settle(t, b, p)
	// Once quiet, syncs trust the view again.
	time.Sleep(300 * time.Millisecond)
	noKick("after the repairs")
	if res := b.partial(p, st); res.AddressesDumped {
		t.Fatal("dumped again after the repairs")
	}
	if names, _ := spread(t, b.cliA.NS, ktest.TCP, ap(v4.web, 80), 2); len(names) != 2 {
		t.Errorf("service traffic after the repairs: %v", names)
	}

	// A watch started outside the namespace of the link's handle would
	// follow another kube-ipvs0: refused.
	var link *addrkernel.Link
	if err := b.node.Do(func() (err error) { link, err = addrkernel.EnsureDevice(b.node.Netlink(t)); return err }); err != nil {
		t.Fatal(err)
	}
	m := addrmgr.NewManager(link, b.guard, nil)
	if err := m.Watch(context.Background(), nil); !errors.Is(err, addrkernel.ErrWatchNamespace) {
		t.Fatalf("watch from the test's namespace: %v, want ErrWatchNamespace", err)
	}
}

// drain returns what ch holds now.
func drain(ch chan bool) []bool {
	var out []bool
	for {
		select {
		case v := <-ch:
			out = append(out, v)
		default:
			return out
		}
	}
}

// settle lets the notifications of a repair come in. An IPv6 address added
// by hand (without nodad) is notified twice, before and after DAD: when the
// second comes after the repair removed it, it is a change the view does
// not hold, and kicks once more; that sync dumps again.
func settle(t *testing.T, b *kbed, p *kproxy) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	select {
	case <-p.kicks:
		res := b.partial(p, b.plan(testCluster()))
		t.Logf("a late notification of the repair kicked again: dumped %v, unbound %d, bound %d", res.AddressesDumped, res.Unbind.Unbound, res.Bind.Bound)
	default:
	}
}
