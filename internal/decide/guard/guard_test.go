package guard

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

func TestCheck(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	g := New(Inputs{
		LocalAddrs:     []netip.Addr{a("10.10.0.211"), a("fd00:10::211")},
		LocalPrefixes:  []netip.Prefix{p("192.168.7.5/24")},
		Nodes:          []model.Node{{Name: "n2", Addresses: []netip.Addr{a("10.10.0.213")}}, {Name: "n1", Addresses: []netip.Addr{a("10.10.0.211")}}},
		APIServers:     []netip.Addr{a("10.10.0.100")},
		Gateways:       []netip.Addr{a("10.10.0.1")},
		ProtectedCIDRs: []netip.Prefix{p("172.31.0.0/16")},
		PodCIDRs:       []netip.Prefix{p("10.0.0.0/16"), p("fd00:1::/64")},
	})
	tests := []struct {
		addr     netip.Addr
		reason   model.Reason
		neverVIP bool
	}{
		{a("10.96.0.10"), "", false},
		{a("fd00:96::10"), "", false},
		{netip.Addr{}, model.ReasonInvalidAddress, true},
		{a("0.0.0.0"), model.ReasonUnspecified, true},
		{a("::"), model.ReasonUnspecified, true},
		{a("127.0.0.1"), model.ReasonLoopback, true},
		{a("127.1.2.3"), model.ReasonLoopback, true},
		{a("::1"), model.ReasonLoopback, true},
		{a("224.0.0.1"), model.ReasonMulticast, true},
		{a("ff02::1"), model.ReasonMulticast, true},
		{a("255.255.255.255"), model.ReasonBroadcast, true},
		{a("192.168.7.255"), model.ReasonBroadcast, true},
		{a("169.254.169.254"), model.ReasonLinkLocal, true},
		{a("fe80::1"), model.ReasonLinkLocal, true},
		{a("::ffff:10.96.0.10"), model.ReasonIPv4Mapped, true},
		{a("::ffff:127.0.0.1"), model.ReasonIPv4Mapped, true},
		{a("10.0.3.2"), model.ReasonPodCIDR, true},
		{a("fd00:1::5"), model.ReasonPodCIDR, true},
		{a("10.10.0.211"), model.ReasonNodeIP, false}, // this node's and in Node n1: NodeIP names the node
		{a("10.10.0.213"), model.ReasonNodeIP, false},
		{a("fd00:10::211"), model.ReasonLocalAddress, false},
		{a("192.168.7.5"), model.ReasonLocalAddress, false},
		{a("10.10.0.100"), model.ReasonAPIServer, false},
		{a("10.10.0.1"), model.ReasonGateway, false},
		{a("172.31.4.4"), model.ReasonProtectedCIDR, false},
		{a("fe80::1%eth0"), model.ReasonLinkLocal, true},
	}
	for _, tt := range tests {
		v := g.Check(tt.addr)
		if v.Reason != tt.reason {
			t.Errorf("Check(%v) reason = %q, want %q (%s)", tt.addr, v.Reason, tt.reason, v.Detail)
		}
		if v.Protected != (tt.reason != "") || v.NeverVIP != tt.neverVIP {
			t.Errorf("Check(%v) = %+v, want protected %v, never a VIP %v", tt.addr, v, tt.reason != "", tt.neverVIP)
		}
		if v.Protected && v.Detail == "" {
			t.Errorf("Check(%v): refusal without detail", tt.addr)
		}
	}
	if v := g.Check(a("10.10.0.211")); v.Node != "n1" || !v.Local {
		t.Errorf("Check(10.10.0.211) = %+v: want node n1 and local", v)
	}
}

func TestCheckNodeAndLocal(t *testing.T) {
	a := netip.MustParseAddr
	g := New(Inputs{
		LocalAddrs: []netip.Addr{a("10.10.0.211")},
		Nodes:      []model.Node{{Name: "zz", Addresses: []netip.Addr{a("10.10.0.5")}}, {Name: "aa", Addresses: []netip.Addr{a("10.10.0.5"), {}}}},
	})
	if v := g.Check(a("10.10.0.5")); v.Node != "aa" || v.Local || !strings.Contains(v.Detail, "aa") {
		t.Errorf("a shared node address = %+v; want the smallest name aa, named in the detail", v)
	}
	if v := g.Check(a("10.10.0.211")); v.Node != "" || !v.Local {
		t.Errorf("a local address that is in no Node = %+v", v)
	}
	if v := g.Check(a("10.10.0.6")); v != (Verdict{}) {
		t.Errorf("an address nothing protects = %+v, want the zero Verdict", v)
	}
}

// TestCheckUnmapsInputs: an input written IPv4-mapped protects the IPv4
// address (a cache file of an older version, a careless caller); a mapped
// prefix shorter than /96 protects every IPv4 address.
func TestCheckUnmapsInputs(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	g := New(Inputs{
		Nodes:          []model.Node{{Name: "n2", Addresses: []netip.Addr{a("::ffff:10.10.0.213")}}},
		APIServers:     []netip.Addr{a("::ffff:10.10.0.100")},
		ProtectedCIDRs: []netip.Prefix{p("::ffff:192.0.2.0/120")},
		LocalPrefixes:  []netip.Prefix{p("::ffff:192.168.7.5/120")},
	})
	for addr, want := range map[string]model.Reason{"10.10.0.213": model.ReasonNodeIP, "10.10.0.100": model.ReasonAPIServer,
		"192.0.2.9": model.ReasonProtectedCIDR, "192.168.7.5": model.ReasonLocalAddress, "192.168.7.255": model.ReasonBroadcast} {
		if v := g.Check(a(addr)); v.Reason != want {
			t.Errorf("Check(%s) = %+v, want %s", addr, v, want)
		}
	}
	wide := New(Inputs{ProtectedCIDRs: []netip.Prefix{p("::ffff:192.0.2.0/64")}})
	if v := wide.Check(a("198.51.100.1")); v.Reason != model.ReasonProtectedCIDR {
		t.Errorf("a mapped /64 protects no IPv4 address: %+v", v)
	}
}

func TestZeroInputs(t *testing.T) {
	g := New(Inputs{ProtectedCIDRs: []netip.Prefix{{}}, PodCIDRs: []netip.Prefix{{}}, LocalPrefixes: []netip.Prefix{{}}})
	if v := g.Check(netip.MustParseAddr("10.96.0.1")); v.Protected {
		t.Errorf("a zero guard protects only never-a-VIP classes: %+v", v)
	}
	if v := g.Check(netip.MustParseAddr("127.0.0.1")); !v.Protected || !v.NeverVIP {
		t.Errorf("loopback is never a VIP: %+v", v)
	}
}

func TestSpecial(t *testing.T) {
	for in, want := range map[string]model.Reason{"10.0.0.1": "", "0.0.0.0": model.ReasonUnspecified, "127.0.0.1": model.ReasonLoopback,
		"224.0.0.1": model.ReasonMulticast, "255.255.255.255": model.ReasonBroadcast, "169.254.1.1": model.ReasonLinkLocal,
		"::ffff:127.0.0.1": model.ReasonIPv4Mapped, "fe80::1%eth0": model.ReasonLinkLocal} {
		if r, what := Special(netip.MustParseAddr(in)); r != want || (r != "") != (what != "") {
			t.Errorf("Special(%s) = %q %q, want %q", in, r, what, want)
		}
	}
	if r, _ := Special(netip.Addr{}); r != model.ReasonInvalidAddress {
		t.Errorf("Special(invalid) = %q", r)
	}
}

func TestFingerprint(t *testing.T) {
	a, b := netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.1.11")
	in := func(nodes []model.Node, local ...netip.Addr) Inputs {
		return Inputs{Nodes: nodes, LocalAddrs: local, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}}
	}
	n := func(name string, as ...netip.Addr) model.Node { return model.Node{Name: name, Addresses: as} }
	fp := func(c Inputs) uint64 { return New(c).Fingerprint() }
	base := fp(in([]model.Node{n("n1", a), n("n2", b)}, a, b))
	for i, c := range []struct {
		in   Inputs
		same bool
	}{
		{in([]model.Node{n("n2", b), n("n1", a)}, b, a), true},
		{in([]model.Node{n("n1", a), n("n2", b)}, a), false},
		{in([]model.Node{n("n1", a), n("n3", b)}, a, b), false},
		{in([]model.Node{n("n1", a)}, a, b), false},
		{Inputs{}, false},
	} {
		if got := fp(c.in) == base; got != c.same {
			t.Errorf("%d: same fingerprint %v, want %v", i, got, c.same)
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
	g := New(Inputs{LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, _ := netip.AddrFromSlice(b)
		v := g.Check(a)
		if v.Protected && (v.Reason == "" || v.Detail == "" || v.Warn) || !v.Protected && (v.NeverVIP || v.Warn != (v.Reason != "") || v.Warn != (v.Detail != "")) {
			t.Fatalf("Check(%v) = %+v: protected, warning, reason and detail disagree", a, v)
		}
	})
}

// TestCheckInfrastructure: the node's infrastructure beyond its default
// gateways (issue 14, item 5) — the next hop of any route, the other end
// of a /31 or /127, a DNS server, the network and broadcast addresses of
// its subnets — is protected; a VIP inside one of its IPv4 subnets is a
// warning while strict ARP is off, nothing with it.
func TestCheckInfrastructure(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	in := Inputs{
		LocalPrefixes: []netip.Prefix{p("198.51.100.1/24"), p("192.0.2.0/31"), p("2001:db8:100::1/64"), p("2001:db8:7::/127"), p("203.0.113.9/32")},
		Gateways:      []netip.Addr{a("198.51.100.254")},
		NextHops:      []netip.Addr{a("198.51.100.253"), a("2001:db8:100::fd")},
		Resolvers:     []netip.Addr{a("192.0.2.53")},
	}
	g := New(in)
	for addr, want := range map[string]model.Reason{
		"198.51.100.254":   model.ReasonGateway,
		"198.51.100.253":   model.ReasonGateway,
		"2001:db8:100::fd": model.ReasonGateway,
		"192.0.2.1":        model.ReasonPeer,
		"192.0.2.0":        model.ReasonLocalAddress,
		"2001:db8:7::1":    model.ReasonPeer,
		"192.0.2.53":       model.ReasonResolver,
		"198.51.100.0":     model.ReasonNetworkAddress,
		"198.51.100.255":   model.ReasonBroadcast,
		"2001:db8:100::":   model.ReasonNetworkAddress,
		"198.51.100.77":    model.ReasonOnLinkSubnet,
		"2001:db8:100::77": "", // neighbour discovery answers only on the link holding it
		"203.0.113.10":     "",
		"10.96.0.1":        "",
	} {
		v := g.Check(a(addr))
		if v.Reason != want {
			t.Errorf("Check(%s) = %+v, want %q", addr, v, want)
		}
		if v.Warn != (want == model.ReasonOnLinkSubnet) || v.Protected != (want != "" && !v.Warn) {
			t.Errorf("Check(%s) = %+v: protected or warning wrong", addr, v)
		}
	}
	in.StrictARP = true
	if v := New(in).Check(a("198.51.100.77")); v != (Verdict{}) {
		t.Errorf("with strict ARP, an on-link VIP = %+v, want nothing", v)
	}
}

// TestCheckPort: a node address served at L4 never captures a port the
// node serves itself — one of --protected-node-ports, or one it listens
// on there (issue 14, item 6).
func TestCheckPort(t *testing.T) {
	a := netip.MustParseAddr
	ports, err := model.ParsePortRanges(DefaultProtectedNodePorts)
	if err != nil {
		t.Fatal(err)
	}
	g := New(Inputs{ProtectedPorts: ports, Listeners: []model.Listener{
		{Protocol: model.TCP, Addr: a("0.0.0.0"), Port: 8080}, {Protocol: model.UDP, Addr: a("198.51.100.1"), Port: 5353}, {Protocol: model.TCP, Addr: a("::"), Port: 9100},
		{Protocol: model.TCP, Addr: a("127.0.0.1"), Port: 9999}, {Protocol: model.SCTP, Addr: a("::ffff:198.51.100.1"), Port: 3868},
	}})
	for _, tc := range []struct {
		proto model.Protocol
		addr  string
		port  uint16
		want  bool
	}{
		{model.TCP, "198.51.100.1", 22, true}, {model.UDP, "198.51.100.1", 179, true}, {model.TCP, "198.51.100.1", 2380, true},
		{model.TCP, "198.51.100.1", 10250, true}, {model.TCP, "198.51.100.1", 10251, false}, {model.TCP, "198.51.100.1", 10256, true},
		{model.TCP, "198.51.100.1", 8080, true}, {model.TCP, "2001:db8::1", 8080, false}, {model.UDP, "198.51.100.1", 8080, false},
		{model.UDP, "198.51.100.1", 5353, true}, {model.UDP, "198.51.100.2", 5353, false},
		{model.TCP, "198.51.100.1", 9100, true}, {model.TCP, "2001:db8::1", 9100, true},
		{model.TCP, "198.51.100.1", 9999, false}, {model.SCTP, "198.51.100.1", 3868, true},
		{model.TCP, "198.51.100.1", 30080, false},
	} {
		v := g.CheckPort(tc.proto, a(tc.addr), tc.port)
		if v.Protected != tc.want || v.Protected != (v.Reason == model.ReasonNodeServicePort) || v.Protected != (v.Detail != "") {
			t.Errorf("CheckPort(%s %s:%d) = %+v, want protected %v", tc.proto, tc.addr, tc.port, v, tc.want)
		}
	}
	if g.Fingerprint() == New(Inputs{ProtectedPorts: ports}).Fingerprint() {
		t.Error("the listeners do not change the fingerprint")
	}
	for _, bad := range []string{"0", "22-21", "x", "70000", "1-"} {
		if _, err := model.ParsePortRanges(bad); err == nil {
			t.Errorf("model.ParsePortRanges(%q) gave no error", bad)
		}
	}
}
