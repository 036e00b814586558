package planner

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// The families come from what run and plan both see: a global IPv6
// address on one of the node's interfaces (run reads every interface; plan
// gets --node-ip) makes the node plan IPv6 only when the Node object or the
// flags name IPv6 too.
func TestFamiliesFromConfiguration(t *testing.T) {
	v4Node := []model.Node{{Name: "n1", Addresses: []netip.Addr{addr("10.10.0.1")}}}
	for _, tt := range []struct {
		name  string
		nodes []model.Node
		cidrs []netip.Prefix
		np    []netip.Prefix
		want  []string
	}{
		{"IPv4-only cluster", v4Node, []netip.Prefix{pfx("10.0.0.0/16")}, nil, []string{"inet"}},
		{"dual-stack cluster CIDR", v4Node, []netip.Prefix{pfx("10.0.0.0/16"), pfx("fd00:1::/64")}, nil, []string{"inet", "inet6"}},
		{"dual-stack Node", testNodes, []netip.Prefix{pfx("10.0.0.0/16")}, nil, []string{"inet", "inet6"}},
		{"IPv6 NodePort addresses", v4Node, []netip.Prefix{pfx("10.0.0.0/16")}, []netip.Prefix{pfx("10.10.0.0/24"), pfx("2001:db8:100::/64")}, []string{"inet", "inet6"}},
		{"nothing names a family", nil, nil, nil, []string{"inet", "inet6"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := opts()
			o.LocalAddrs = append(o.LocalAddrs, addr("2001:db8:100::1"))
			o.ClusterCIDRs, o.NodePortAddresses = tt.cidrs, tt.np
			sp := svc("web", "10.96.0.10")
			sp.NodePort = 30080
			c := model.Cluster{Services: []model.ServicePort{sp}, Nodes: tt.nodes}
			st := Plan(c, o)
			var got []string
			for _, rs := range st.Rulesets {
				got = append(got, rs.Family)
			}
			eq(t, "families", got, tt.want)
			v6 := slices.ContainsFunc(st.IPSets, func(s iptables.IPSet) bool { return strings.HasPrefix(s.Name, "KUBE-6-") })
			if v6 != slices.Contains(tt.want, "inet6") {
				t.Errorf("KUBE-6-* sets planned: %v", v6)
			}
			if vs := findVS(st, model.TCP, "2001:db8:100::1", 30080); vs != nil && !slices.Contains(tt.want, "inet6") {
				t.Errorf("NodePort on the IPv6 address of a node that does not plan IPv6")
			}
		})
	}
}
