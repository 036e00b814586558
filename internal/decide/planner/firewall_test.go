package planner

import (
	"net/netip"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// TestSourceRangesFailClosed: a LoadBalancer IP whose source ranges leave
// nothing of its own family is in KUBE-LOAD-BALANCER-FW with no
// KUBE-LOAD-BALANCER-SOURCE-CIDR entry, so KUBE-SOURCE-RANGES-FIREWALL
// drops every source: never open to everyone.
func TestSourceRangesFailClosed(t *testing.T) {
	for _, tt := range []struct {
		name     string
		ranges   []netip.Prefix
		firewall bool
		cidrs    []string
	}{
		{name: "only IPv6 ranges on an IPv4 LoadBalancer IP", ranges: []netip.Prefix{pfx("2001:db8::/32")}, cidrs: []string{}},
		{name: "an IPv4-mapped range left as written", ranges: []netip.Prefix{pfx("::ffff:192.0.2.0/120")}, cidrs: []string{}},
		{name: "ranges given, none valid", firewall: true, cidrs: []string{}},
		{name: "one usable range among others", ranges: []netip.Prefix{pfx("2001:db8::/32"), pfx("192.0.2.0/24")},
			cidrs: []string{"198.51.100.20,tcp:80,192.0.2.0/24"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sp := svc("lb", "10.96.0.20")
			sp.LoadBalancerIPs = []netip.Addr{addr("198.51.100.20")}
			sp.LoadBalancerSourceRanges = tt.ranges
			sp.LoadBalancerFirewall = tt.firewall
			c := cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: {ready("10.0.1.5", 80, "n1")}}, sp)
			st := Plan(c, opts())
			if findVS(st, model.TCP, "198.51.100.20", 80) == nil {
				t.Fatal("the LoadBalancer IP is not served")
			}
			eq(t, "KUBE-LOAD-BALANCER-FW", entries(st, "KUBE-LOAD-BALANCER-FW"), []string{"198.51.100.20,tcp:80"})
			eq(t, "KUBE-LOAD-BALANCER-SOURCE-CIDR", entries(st, "KUBE-LOAD-BALANCER-SOURCE-CIDR"), tt.cidrs)
			eq(t, "KUBE-LOAD-BALANCER-SOURCE-IP", entries(st, "KUBE-LOAD-BALANCER-SOURCE-IP"), []string{})
		})
	}

	// No ranges at all: open to everyone, as the API specifies.
	sp := svc("lb", "10.96.0.20")
	sp.LoadBalancerIPs = []netip.Addr{addr("198.51.100.20")}
	st := Plan(cluster(nil, sp), opts())
	eq(t, "KUBE-LOAD-BALANCER-FW without ranges", entries(st, "KUBE-LOAD-BALANCER-FW"), []string{})
}
