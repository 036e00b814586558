package recovery

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

func pfx(s string) netip.Prefix {
	if !strings.Contains(s, "/") {
		a := netip.MustParseAddr(s)
		return netip.PrefixFrom(a, a.BitLen())
	}
	return netip.MustParsePrefix(s)
}

func pfxs(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = pfx(s)
	}
	return out
}

func key(s string) ipvs.Key {
	proto, ap, _ := strings.Cut(s, " ")
	a := netip.MustParseAddrPort(ap)
	return ipvs.Key{Protocol: model.Protocol(proto), Address: a.Addr(), Port: a.Port()}
}

func vss(ss ...string) []ipvs.VirtualServer {
	out := make([]ipvs.VirtualServer, len(ss))
	for i, s := range ss {
		out[i] = ipvs.VirtualServer{Key: key(s), Scheduler: "rr"}
	}
	return out
}

// node A is 198.51.100.1/24 with gateway 198.51.100.254; node B is
// 198.51.100.2; the API server is 198.51.100.10.
func testGuard() *guard.Guard {
	return guard.New(guard.Inputs{
		LocalAddrs:    []netip.Addr{netip.MustParseAddr("198.51.100.1")},
		LocalPrefixes: pfxs("198.51.100.1/24", "2001:db8:100::1/64"),
		Nodes: []model.Node{{Name: "a", Addresses: []netip.Addr{netip.MustParseAddr("198.51.100.1")}},
			{Name: "b", Addresses: []netip.Addr{netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8:100::2")}}},
		APIServers:     []netip.Addr{netip.MustParseAddr("198.51.100.10")},
		Gateways:       []netip.Addr{netip.MustParseAddr("198.51.100.254")},
		ProtectedCIDRs: pfxs("192.0.2.0/28"),
		PodCIDRs:       pfxs("10.244.0.0/16"),
	})
}

// render is one finding per line: "ADDR REASON [vs,vs] kept?".
func render(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		ks := make([]string, len(f.VirtualServers))
		for i, k := range f.VirtualServers {
			ks[i] = string(k.Protocol) + " " + netip.AddrPortFrom(k.Address, k.Port).String()
		}
		fmt.Fprintf(&b, "%s %s [%s]", f.Address, f.Reason, strings.Join(ks, ","))
		if f.Kept != "" {
			b.WriteString(" kept")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestFind(t *testing.T) {
	vip := "10.96.0.10/32"
	for _, tc := range []struct {
		name  string
		facts Facts
		want  string
	}{
		{name: "empty", facts: Facts{Guard: testGuard()}, want: ""},
		{
			name:  "legitimate VIP offline",
			facts: Facts{Guard: testGuard(), Bound: pfxs(vip), VirtualServers: vss("tcp 10.96.0.10:80")},
			want:  "",
		},
		{
			name: "the disaster: node B's address with its virtual server",
			facts: Facts{Guard: testGuard(), Bound: pfxs(vip, "198.51.100.2/32"),
				VirtualServers: vss("tcp 10.96.0.10:80", "tcp 198.51.100.2:6443", "udp 198.51.100.2:53", "tcp 198.51.100.3:80")},
			want: "198.51.100.2/32 NodeIP [udp 198.51.100.2:53,tcp 198.51.100.2:6443]\n",
		},
		{
			name: "own address: unbound, its NodePort and foreign servers kept",
			facts: Facts{Guard: testGuard(), Bound: pfxs("198.51.100.1/32"),
				VirtualServers: vss("tcp 198.51.100.1:30080", "tcp 198.51.100.1:80")},
			want: "198.51.100.1/32 NodeIP [] kept\n",
		},
		{
			name: "every protected class",
			facts: Facts{Guard: testGuard(), Bound: pfxs(
				"0.0.0.0/32", "127.0.0.1/32", "169.254.169.254/32", "224.0.0.1/32", "255.255.255.255/32",
				"198.51.100.255/32", "10.244.1.5/32", "198.51.100.10/32", "198.51.100.254/32", "192.0.2.3/32",
				"::1/128", "fe80::1/128", "2001:db8:100::2/128", "::ffff:10.0.0.1/128")},
			want: "0.0.0.0/32 Unspecified []\n10.244.1.5/32 PodCIDR []\n127.0.0.1/32 Loopback []\n" +
				"169.254.169.254/32 LinkLocal []\n192.0.2.3/32 ProtectedCIDR []\n198.51.100.10/32 APIServer []\n" +
				"198.51.100.254/32 Gateway []\n198.51.100.255/32 Broadcast []\n224.0.0.1/32 Multicast []\n" +
				"255.255.255.255/32 Broadcast []\n::1/128 Loopback []\n::ffff:10.0.0.1/128 IPv4MappedIPv6 []\n" +
				"2001:db8:100::2/128 NodeIP []\nfe80::1/128 LinkLocal []\n",
		},
		{
			name:  "a wide prefix",
			facts: Facts{Guard: testGuard(), Bound: pfxs("10.96.0.0/24")},
			want:  "10.96.0.0/24 NotHostPrefix []\n",
		},
		{
			name: "API answered: a VIP no Service wants goes with its servers",
			facts: Facts{Guard: testGuard(), Bound: pfxs(vip, "10.96.0.11/32"), WantedKnown: true, Wanted: pfxs(vip),
				VirtualServers: vss("tcp 10.96.0.10:80", "tcp 10.96.0.11:80")},
			want: "10.96.0.11/32 NotWanted [tcp 10.96.0.11:80]\n",
		},
		{
			name:  "API answered, nothing wanted",
			facts: Facts{Guard: testGuard(), Bound: pfxs(vip), WantedKnown: true},
			want:  "10.96.0.10/32 NotWanted []\n",
		},
		{
			name:  "offline without --stale: a VIP without servers stays",
			facts: Facts{Guard: testGuard(), Bound: pfxs(vip, "10.96.0.11/32"), VirtualServers: vss("tcp 10.96.0.10:80")},
			want:  "",
		},
		{
			name:  "offline with --stale: a VIP without servers goes",
			facts: Facts{Guard: testGuard(), Stale: true, Bound: pfxs(vip, "10.96.0.11/32"), VirtualServers: vss("tcp 10.96.0.10:80")},
			want:  "10.96.0.11/32 NoVirtualServer []\n",
		},
		{
			name: "--stale is moot when the API answered",
			facts: Facts{Guard: testGuard(), Stale: true, WantedKnown: true, Wanted: pfxs("10.96.0.11/32"),
				Bound: pfxs("10.96.0.11/32")},
			want: "",
		},
		{
			name: "excluded virtual servers stay",
			facts: Facts{Guard: testGuard(), Bound: pfxs("198.51.100.2/32"), ExcludeCIDRs: pfxs("198.51.100.2/32"),
				VirtualServers: vss("tcp 198.51.100.2:80")},
			want: "198.51.100.2/32 NodeIP [] kept\n",
		},
		{
			name: "an excluded address no Service wants stays; a protected one goes (item 13)",
			facts: Facts{Guard: testGuard(), WantedKnown: true, Stale: true, ExcludeCIDRs: pfxs("10.1.0.0/16", "192.0.2.0/24"),
				Bound: pfxs("10.1.0.5/32", "192.0.2.3/32", "10.96.0.11/32")},
			want: "10.96.0.11/32 NotWanted []\n192.0.2.3/32 ProtectedCIDR []\n",
		},
		{
			name:  "no guard: only the never-a-VIP classes",
			facts: Facts{Bound: pfxs("198.51.100.2/32", "127.0.0.2/32")},
			want:  "127.0.0.2/32 Loopback []\n",
		},
		{
			name:  "duplicates and order",
			facts: Facts{Guard: testGuard(), Bound: pfxs("198.51.100.2/32", "127.0.0.1/32", "198.51.100.2/32")},
			want:  "127.0.0.1/32 Loopback []\n198.51.100.2/32 NodeIP []\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(Find(tc.facts))
			if got != tc.want {
				t.Errorf("Find:\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}

func TestFindDetail(t *testing.T) {
	fs := Find(Facts{Guard: testGuard(), Bound: pfxs("198.51.100.2/32")})
	if len(fs) != 1 || !strings.Contains(fs[0].Detail, "node b") {
		t.Fatalf("detail does not name node b: %+v", fs)
	}
}

func TestApply(t *testing.T) {
	link := addrmgrtest.NewFakeLink(pfxs("10.96.0.10/32", "198.51.100.2/32", "198.51.100.1/32")...)
	table := ipvstest.NewFakeTable(vss("tcp 10.96.0.10:80", "tcp 198.51.100.2:6443", "tcp 198.51.100.1:30080", "tcp 203.0.113.5:80")...)
	fs := Find(Facts{Guard: testGuard(), Bound: pfxs("10.96.0.10/32", "198.51.100.2/32", "198.51.100.1/32"),
		VirtualServers: vss("tcp 10.96.0.10:80", "tcp 198.51.100.2:6443", "tcp 198.51.100.1:30080", "tcp 203.0.113.5:80")})
	res := Apply(link, table, fs)
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := link.String(), "10.96.0.10/32\n"; got != want {
		t.Errorf("kube-ipvs0 after Apply:\n%s\nwant:\n%s", got, want)
	}
	got := table.String()
	for _, keep := range []string{"10.96.0.10:80", "198.51.100.1:30080", "203.0.113.5:80"} {
		if !strings.Contains(got, keep) {
			t.Errorf("virtual server %s was removed:\n%s", keep, got)
		}
	}
	if strings.Contains(got, "198.51.100.2") {
		t.Errorf("virtual server on node B's address survived:\n%s", got)
	}
	if len(res.Unbound) != 2 || len(res.Deleted) != 1 {
		t.Errorf("result: unbound %v deleted %v", res.Unbound, res.Deleted)
	}
	// Again: the addresses are gone; the fake refuses to delete them twice,
	// the virtual server already gone counts as deleted.
	res = Apply(link, table, fs)
	if len(res.Deleted) != 1 {
		t.Errorf("second apply: deleted %v errors %v", res.Deleted, res.Errors)
	}
}

func TestApplyFailure(t *testing.T) {
	link := addrmgrtest.NewFakeLink(pfx("198.51.100.2/32"))
	table := ipvstest.NewFakeTable(vss("tcp 198.51.100.2:6443", "udp 198.51.100.2:53")...)
	boom := errors.New("boom")
	table.Fail = func(op string, k ipvs.Key) error {
		if k.Protocol == model.TCP {
			return boom
		}
		return nil
	}
	fs := Find(Facts{Guard: testGuard(), Bound: pfxs("198.51.100.2/32"), VirtualServers: vss("tcp 198.51.100.2:6443", "udp 198.51.100.2:53")})
	res := Apply(link, table, fs)
	if err := res.Err(); !errors.Is(err, ErrRemove) || !errors.Is(err, boom) {
		t.Fatalf("error %v does not wrap ErrRemove and the cause", err)
	}
	if len(res.Unbound) != 1 || len(res.Deleted) != 1 {
		t.Errorf("did not go on after the failure: %+v", res)
	}
}
