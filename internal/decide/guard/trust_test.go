package guard

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// A Node claiming the cluster DNS's and the API's ClusterIPs, junk and a
// pod range over the service CIDR protects none of them, and says so.
func TestTrustNodes(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	nodes := []model.Node{
		{Name: "n1", Addresses: []netip.Addr{a("10.10.0.211")}, PodCIDRs: []netip.Prefix{p("10.244.1.0/24")}},
		{Name: "n9", Addresses: []netip.Addr{a("10.10.0.219"), a("10.96.0.10"), a("10.96.0.1"), a("0.0.0.0"), a("fd00:96::5")},
			PodCIDRs: []netip.Prefix{p("10.96.0.0/24"), p("fd00:96::/112")}},
		{Name: "n8", PodCIDRs: []netip.Prefix{p("0.0.0.0/0")}},
	}
	before := slices.Clone(nodes[1].Addresses)
	got, refusals := TrustNodes(nodes, Trust{ServiceCIDRs: []netip.Prefix{p("fd00:96::/108")}, ServiceIPs: []netip.Addr{a("10.96.0.1"), a("10.96.0.10")}})
	if !slices.Equal(nodes[1].Addresses, before) {
		t.Fatalf("TrustNodes modified its input: %v", nodes[1].Addresses)
	}
	if !slices.Equal(got[0].Addresses, nodes[0].Addresses) || !slices.Equal(got[0].PodCIDRs, nodes[0].PodCIDRs) {
		t.Errorf("n1 lost something: %+v", got[0])
	}
	if want := []netip.Addr{a("10.10.0.219")}; !slices.Equal(got[1].Addresses, want) || len(got[1].PodCIDRs) != 0 || len(got[2].PodCIDRs) != 0 {
		t.Errorf("n9 and n8 keep %v %v %v, want only %v", got[1].Addresses, got[1].PodCIDRs, got[2].PodCIDRs, want)
	}
	var lines []string
	for _, r := range refusals {
		if r.Subject.Kind != model.SubjectNode {
			t.Errorf("refusal %v: subject is no Node", r)
		}
		lines = append(lines, r.Subject.Name+" "+r.Field+" "+r.Address+" "+string(r.Reason))
	}
	want := []string{
		"n8 spec.podCIDRs 0.0.0.0/0 ServiceIP",
		"n9 spec.podCIDRs 10.96.0.0/24 ServiceIP",
		"n9 spec.podCIDRs fd00:96::/112 ServiceIP",
		"n9 status.addresses 0.0.0.0 Unspecified",
		"n9 status.addresses 10.96.0.1 ServiceIP",
		"n9 status.addresses 10.96.0.10 ServiceIP",
		"n9 status.addresses fd00:96::5 ServiceIP",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("refusals:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	g := New(Inputs{Nodes: got})
	for _, vip := range []string{"10.96.0.1", "10.96.0.10", "10.96.0.200", "fd00:96::5"} {
		if v := g.Check(a(vip)); v.Protected {
			t.Errorf("Check(%s) = %+v: a Node's claim protects a Service IP", vip, v)
		}
	}
}

// The guard itself never takes a Node address inside --service-cidrs,
// even from a Node no TrustNodes saw (the startup pass, the node cache).
func TestNewSkipsNodeAddressesInServiceCIDRs(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	g := New(Inputs{ServiceCIDRs: []netip.Prefix{p("10.96.0.0/12")},
		Nodes: []model.Node{{Name: "n9", Addresses: []netip.Addr{a("10.96.0.10"), a("10.10.0.219")}}}})
	if v := g.Check(a("10.96.0.10")); v.Protected {
		t.Errorf("Check(10.96.0.10) = %+v", v)
	}
	if v := g.Check(a("10.10.0.219")); v.Reason != model.ReasonNodeIP {
		t.Errorf("Check(10.10.0.219) = %+v, want NodeIP", v)
	}
}

func TestPlatformAndNodePodRanges(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	g := New(Inputs{PlatformCIDRs: []netip.Prefix{p("100.100.2.136/31")},
		Nodes: []model.Node{{Name: "n2", PodCIDRs: []netip.Prefix{p("10.244.2.0/24"), p("fd00:244:2::/64")}}}})
	for _, tt := range []struct {
		addr   string
		reason model.Reason
	}{
		{"168.63.129.16", model.ReasonCloudPlatform},
		{"100.100.100.200", model.ReasonCloudPlatform},
		{"fd00:ec2::254", model.ReasonCloudPlatform},
		{"fd00:ec2::123", model.ReasonCloudPlatform},
		{"fd20:ce::254", model.ReasonCloudPlatform},
		{"fd00:c1::a9fe:a9fe", model.ReasonCloudPlatform},
		{"100.100.2.137", model.ReasonCloudPlatform},
		{"10.244.2.53", model.ReasonPodCIDR},
		{"fd00:244:2::53", model.ReasonPodCIDR},
		{"10.244.3.53", ""},
	} {
		v := g.Check(a(tt.addr))
		if v.Reason != tt.reason || v.Protected != (tt.reason != "") || v.NeverVIP != (tt.reason != "") {
			t.Errorf("Check(%s) = %+v, want %q, never a VIP", tt.addr, v, tt.reason)
		}
	}
	if v := g.Check(a("10.244.2.53")); !strings.Contains(v.Detail, "n2") {
		t.Errorf("a pod address' refusal does not name its Node: %q", v.Detail)
	}
	for _, pa := range PlatformAddrs() {
		if classOf(pa) != nil {
			t.Errorf("%s is a never-a-VIP class already: no need to list it", pa)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	ports, _ := model.ParsePortRanges(DefaultProtectedNodePorts)
	g := New(Inputs{
		LocalAddrs:         []netip.Addr{a("10.10.0.211")},
		Nodes:              []model.Node{{Name: "n2", Addresses: []netip.Addr{a("10.10.0.212")}}},
		APIServers:         []netip.Addr{a("10.10.0.100")},
		ServiceCIDRs:       []netip.Prefix{p("10.96.0.0/12")},
		ProtectedPorts:     ports,
		EndpointNamespaces: []string{"monitoring"},
	})
	tenant := types.NamespacedName{Namespace: "tenant", Name: "web"}
	for _, tt := range []struct {
		svc    types.NamespacedName
		addr   string
		port   uint16
		reason model.Reason
	}{
		{tenant, "10.244.1.5", 8080, ""},
		{tenant, "10.96.0.1", 443, model.ReasonServiceIP},
		{tenant, "168.63.129.16", 80, model.ReasonCloudPlatform},
		{tenant, "10.10.0.212", 22, model.ReasonNodeServicePort},
		{tenant, "10.10.0.211", 10250, model.ReasonNodeServicePort},
		{tenant, "10.10.0.100", 2379, model.ReasonNodeServicePort},
		{tenant, "10.10.0.212", 9100, ""},
		{APIServerService, "10.10.0.100", 6443, ""},
		{types.NamespacedName{Namespace: "monitoring", Name: "kubelet"}, "10.10.0.212", 10250, ""},
		{types.NamespacedName{Namespace: "monitoring", Name: "x"}, "fd00:ec2::254", 80, model.ReasonCloudPlatform},
	} {
		v := g.CheckEndpoint(tt.svc, a(tt.addr), tt.port)
		if v.Reason != tt.reason || v.Protected != (tt.reason != "") {
			t.Errorf("CheckEndpoint(%s, %s:%d) = %+v, want %q", tt.svc, tt.addr, tt.port, v, tt.reason)
		}
	}
}
