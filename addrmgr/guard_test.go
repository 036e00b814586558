package addrmgr

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

func TestGuardCheck(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	g := NewGuard(GuardConfig{
		LocalAddrs:     []netip.Addr{a("10.10.0.211"), a("fd00:10::211")},
		LocalPrefixes:  []netip.Prefix{p("192.168.7.5/24")},
		NodeAddrs:      NodeAddresses([]model.Node{{Name: "n2", Addresses: []netip.Addr{a("10.10.0.213")}}, {Name: "n1", Addresses: []netip.Addr{a("10.10.0.211")}}}),
		APIServers:     []netip.Addr{a("10.10.0.100")},
		Gateways:       []netip.Addr{a("10.10.0.1")},
		ProtectedCIDRs: []netip.Prefix{p("172.31.0.0/16")},
		PodCIDRs:       []netip.Prefix{p("10.0.0.0/16"), p("fd00:1::/64")},
	})
	tests := []struct {
		addr   netip.Addr
		reason model.Reason
	}{
		{a("10.96.0.10"), ""},
		{a("fd00:96::10"), ""},
		{netip.Addr{}, model.ReasonInvalidAddress},
		{a("0.0.0.0"), model.ReasonUnspecified},
		{a("::"), model.ReasonUnspecified},
		{a("127.0.0.1"), model.ReasonLoopback},
		{a("127.1.2.3"), model.ReasonLoopback},
		{a("::1"), model.ReasonLoopback},
		{a("224.0.0.1"), model.ReasonMulticast},
		{a("ff02::1"), model.ReasonMulticast},
		{a("255.255.255.255"), model.ReasonBroadcast},
		{a("192.168.7.255"), model.ReasonBroadcast},
		{a("169.254.169.254"), model.ReasonLinkLocal},
		{a("fe80::1"), model.ReasonLinkLocal},
		{a("::ffff:10.96.0.10"), model.ReasonIPv4Mapped},
		{a("10.0.3.2"), model.ReasonPodCIDR},
		{a("fd00:1::5"), model.ReasonPodCIDR},
		{a("10.10.0.211"), model.ReasonNodeIP}, // this node's and in Node n1: NodeIP names the node
		{a("10.10.0.213"), model.ReasonNodeIP},
		{a("fd00:10::211"), model.ReasonLocalAddress},
		{a("192.168.7.5"), model.ReasonLocalAddress},
		{a("10.10.0.100"), model.ReasonAPIServer},
		{a("10.10.0.1"), model.ReasonGateway},
		{a("172.31.4.4"), model.ReasonProtectedCIDR},
		{a("fe80::1%eth0"), model.ReasonLinkLocal},
	}
	for _, tt := range tests {
		reason, detail, allowed := g.Check(tt.addr)
		if reason != tt.reason {
			t.Errorf("Check(%v) reason = %q, want %q (%s)", tt.addr, reason, tt.reason, detail)
		}
		if allowed != (tt.reason == "") {
			t.Errorf("Check(%v) allowed = %v, want %v", tt.addr, allowed, tt.reason == "")
		}
		if !allowed && detail == "" {
			t.Errorf("Check(%v): refusal without detail", tt.addr)
		}
	}
}

func TestGuardNodeAddressAndLocal(t *testing.T) {
	a := netip.MustParseAddr
	g := NewGuard(GuardConfig{
		LocalAddrs: []netip.Addr{a("10.10.0.211")},
		NodeAddrs:  NodeAddresses([]model.Node{{Name: "zz", Addresses: []netip.Addr{a("10.10.0.5")}}, {Name: "aa", Addresses: []netip.Addr{a("10.10.0.5"), {}}}}),
	})
	if n, ok := g.IsNodeAddress(a("10.10.0.5")); !ok || n != "aa" {
		t.Errorf("IsNodeAddress shared address = %q, %v; want smallest name aa", n, ok)
	}
	if _, ok := g.IsNodeAddress(a("10.10.0.211")); ok {
		t.Error("a local address that is in no Node is not a node address")
	}
	if _, ok := g.IsNodeAddress(netip.Addr{}); ok {
		t.Error("invalid address is no node address")
	}
	if !g.IsLocal(a("10.10.0.211")) || g.IsLocal(a("10.10.0.5")) || g.IsLocal(netip.Addr{}) {
		t.Error("IsLocal wrong")
	}
	_, detail, _ := g.Check(a("10.10.0.5"))
	if detail == "" || !strings.Contains(detail, "aa") {
		t.Errorf("NodeIP detail %q does not name the node", detail)
	}
}

func TestGuardZeroConfig(t *testing.T) {
	g := NewGuard(GuardConfig{ProtectedCIDRs: []netip.Prefix{{}}, PodCIDRs: []netip.Prefix{{}}, LocalPrefixes: []netip.Prefix{{}}})
	if _, _, ok := g.Check(netip.MustParseAddr("10.96.0.1")); !ok {
		t.Error("a zero guard protects only never-a-VIP classes")
	}
	if _, _, ok := g.Check(netip.MustParseAddr("127.0.0.1")); ok {
		t.Error("loopback is never a VIP")
	}
}

func TestNeverVIP(t *testing.T) {
	never := []model.Reason{model.ReasonInvalidAddress, model.ReasonUnspecified, model.ReasonLoopback, model.ReasonMulticast,
		model.ReasonBroadcast, model.ReasonLinkLocal, model.ReasonIPv4Mapped, model.ReasonPodCIDR}
	protected := []model.Reason{model.ReasonNodeIP, model.ReasonLocalAddress, model.ReasonAPIServer, model.ReasonGateway, model.ReasonProtectedCIDR}
	for _, r := range never {
		if !NeverVIP(r) {
			t.Errorf("NeverVIP(%s) = false", r)
		}
	}
	for _, r := range protected {
		if NeverVIP(r) {
			t.Errorf("NeverVIP(%s) = true", r)
		}
	}
}

func TestLastAddr4(t *testing.T) {
	for in, want := range map[string]string{"10.1.2.3/24": "10.1.2.255", "10.0.0.0/8": "10.255.255.255", "0.0.0.0/0": "255.255.255.255", "10.1.2.4/30": "10.1.2.7"} {
		if got := lastAddr4(netip.MustParsePrefix(in).Masked()); got.String() != want {
			t.Errorf("lastAddr4(%s) = %s, want %s", in, got, want)
		}
	}
}

func FuzzGuardCheck(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1})
	f.Add([]byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	g := NewGuard(GuardConfig{LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, _ := netip.AddrFromSlice(b)
		r, d, ok := g.Check(a)
		if ok != (r == "") || ok != (d == "") {
			t.Fatalf("Check(%v) = %q %q %v: reason and allowed disagree", a, r, d, ok)
		}
	})
}
