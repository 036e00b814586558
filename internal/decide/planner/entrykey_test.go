package planner

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// TestEntryKey: every kind of entry the planner builds comes back from its
// entryKey as it was, and distinct entries have distinct keys.
func TestEntryKey(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")
	mapped := netip.MustParseAddr("::ffff:10.96.0.10")
	es := []iptables.Entry{
		{},
		{Port: 30080},
		{IP: v4},
		{IP: v6},
		{IP: mapped},
		{IP: v4, Protocol: model.TCP, Port: 80},
		{IP: v4, Protocol: model.UDP, Port: 80},
		{IP: v6, Protocol: model.SCTP, Port: 80},
		{IP: mapped, Protocol: model.TCP, Port: 80},
		{IP: v4, Protocol: model.TCP, Port: 80, Net: iptables.HostPrefix(v4)},
		{IP: v6, Protocol: model.TCP, Port: 80, Net: iptables.HostPrefix(v6)},
		{IP: v4, Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("0.0.0.0/0")},
		{IP: v4, Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("192.0.2.0/24")},
		{IP: v6, Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("::/0")},
		{IP: v6, Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("2001:db8::/32")},
		{Protocol: model.SCTP, Port: 30080},
	}
	keys := map[entryKey]bool{}
	for _, e := range es {
		k, ok := keyOf(e)
		if !ok {
			t.Errorf("%+v: no key", e)
		}
		if got := k.entry(); got != e {
			t.Errorf("%+v: back as %+v", e, got)
		}
		if keys[k] {
			t.Errorf("%+v: key of another entry", e)
		}
		keys[k] = true
	}
	if n := unsafe.Sizeof(setEntry{}); n > 40 {
		t.Errorf("setEntry is %d B, want at most 40", n)
	}
	if _, ok := keyOf(iptables.Entry{IP: v4, Protocol: "ICMP"}); ok {
		t.Errorf("an ICMP entry has a key")
	}
	zoned := iptables.Entry{IP: netip.MustParseAddr("fe80::1%eth0"), Protocol: model.TCP, Port: 80}
	if k, ok := keyOf(zoned); !ok || k.entry() != (iptables.Entry{IP: zoned.IP.WithZone(""), Protocol: model.TCP, Port: 80}) {
		t.Errorf("%+v: key %t, back as %+v; want the entry without its zone", zoned, ok, k.entry())
	}
}

// TestEntryOfAnotherProtocolRefused: an ipset entry of a protocol the
// entry key cannot hold (never built: service refuses the port first) is
// refused with the port, not planned, and does not stop the planner.
func TestEntryOfAnotherProtocolRefused(t *testing.T) {
	sp := svc("icmp", "10.96.0.1")
	sp.Protocol = "ICMP"
	p := &portPlanner{e: &env{families: [2]bool{true, false}}, sp: &sp, out: &portPlan{}}
	es := p.add(nil, 0, iptables.SetClusterIP, iptables.Entry{IP: addr("10.96.0.1"), Protocol: sp.Protocol, Port: 80})
	if len(es) != 0 {
		t.Errorf("entries %v planned, want none", es)
	}
	rs := p.out.extra().refusals
	if len(rs) != 1 || rs[0].Reason != model.ReasonInvalidProtocol || rs[0].Field != FieldProtocol {
		t.Errorf("refusals %v, want one of the protocol", rs)
	}
}
