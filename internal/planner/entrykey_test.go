package planner

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
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
		k := keyOf(e)
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
	for _, e := range []iptables.Entry{{IP: v4, Protocol: "ICMP"}, {IP: netip.MustParseAddr("fe80::1%eth0")}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v: no panic", e)
				}
			}()
			keyOf(e)
		}()
	}
}
