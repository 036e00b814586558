package planner

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// etpLocal is a dual-stack Service of every external kind with
// externalTrafficPolicy Local, planned on n1 (dualOpts).
func etpLocal() model.ServicePort {
	sp := svc("web", "10.96.0.30", "fd00:96::30")
	sp.NodePort = 30030
	sp.ExternalIPs = []netip.Addr{addr("203.0.113.30"), addr("2001:db8:113::30")}
	sp.LoadBalancerIPs = []netip.Addr{addr("198.51.100.30"), addr("2001:db8:100::30")}
	sp.ExternalPolicyLocal = true
	return sp
}

// The external servers of the Local policy, both families and every kind,
// and what the fallback puts in KUBE-EXTERNAL-NO-LOCAL for each.
var fallbackServers = []struct {
	ip    string
	port  uint16
	entry string
}{
	{"10.10.0.1", 30030, "10.10.0.1,tcp:30030"},
	{"203.0.113.30", 80, "203.0.113.30,tcp:80"},
	{"198.51.100.30", 80, "198.51.100.30,tcp:80"},
	{"fd00:10::1", 30030, "fd00:10::1,tcp:30030"},
	{"2001:db8:113::30", 80, "2001:db8:113::30,tcp:80"},
	{"2001:db8:100::30", 80, "2001:db8:100::30,tcp:80"},
}

// TestLocalPolicyFallback: with externalTrafficPolicy Local and no endpoint
// on this node, the NodePort, externalIP and LoadBalancer servers of both
// families get the cluster's endpoints (for the node and its pods) and an
// entry in KUBE-EXTERNAL-NO-LOCAL (which keeps external clients out); once
// the node has an endpoint, only it, and no entry. Through an Incremental,
// as a partial sync plans it.
func TestLocalPolicyFallback(t *testing.T) {
	sp := etpLocal()
	remote := []model.Endpoint{ready("10.0.2.5", 80, "n2"), ready("10.0.3.5", 80, "n3"), ready("fd00:1::2:5", 80, "n2")}
	inc := NewIncremental(dualOpts(), testNodes, nil)
	inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, map[model.ServicePortName][]model.Endpoint{sp.Name: remote}, nil)
	st := inc.State()
	for _, s := range fallbackServers {
		want := []string{"10.0.2.5:80", "10.0.3.5:80"}
		if strings.Contains(s.ip, ":") {
			want = []string{"[fd00:1::2:5]:80"}
		}
		eq(t, "no local endpoint: "+s.ip, rsList(findVS(st, model.TCP, s.ip, s.port)), want)
	}
	eq(t, "KUBE-EXTERNAL-NO-LOCAL", entries(st, iptables.SetExternalNoLocal),
		[]string{"10.10.0.1,tcp:30030", "198.51.100.30,tcp:80", "203.0.113.30,tcp:80"})
	eq(t, "KUBE-6-EXTERNAL-NO-LOCAL", entries(st, iptables.SetName(iptables.SetExternalNoLocal, iptables.FamilyIPv6)),
		[]string{"2001:db8:100::30,tcp:80", "2001:db8:113::30,tcp:80", "fd00:10::1,tcp:30030"})
	eq(t, "cluster IP (Cluster policy)", rsList(findVS(st, model.TCP, "10.96.0.30", 80)), []string{"10.0.2.5:80", "10.0.3.5:80"})
	if got := inc.NoLocalEndpoints(); got[0].External != 1 || got[1].External != 1 {
		t.Errorf("NoLocalEndpoints %+v: still counted as without local endpoints", got)
	}

	// An IPv4 endpoint on n1: the IPv4 servers serve it alone, their entries
	// go; IPv6 has none on n1 and keeps the fallback.
	local := append(slices.Clone(remote), ready("10.0.1.5", 80, "n1"))
	inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, map[model.ServicePortName][]model.Endpoint{sp.Name: local}, nil)
	st = inc.State()
	for _, s := range fallbackServers[:3] {
		eq(t, "local endpoint: "+s.ip, rsList(findVS(st, model.TCP, s.ip, s.port)), []string{"10.0.1.5:80"})
	}
	eq(t, "KUBE-EXTERNAL-NO-LOCAL with a local endpoint", entries(st, iptables.SetExternalNoLocal), []string{})
	eq(t, "KUBE-6-EXTERNAL-NO-LOCAL", entries(st, iptables.SetName(iptables.SetExternalNoLocal, iptables.FamilyIPv6)),
		[]string{"2001:db8:100::30,tcp:80", "2001:db8:113::30,tcp:80", "fd00:10::1,tcp:30030"})

	// The endpoint gone again: back to the fallback, as Plan gives it.
	inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, map[model.ServicePortName][]model.Endpoint{sp.Name: remote}, nil)
	if got, want := text(t, inc.State()), text(t, Plan(cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: remote}, sp), dualOpts())); got != want {
		t.Errorf("after the local endpoint went, the incremental state differs from Plan:\n%s\nwant:\n%s", got, want)
	}
}

// TestLocalPolicyNoEndpointsAnywhere: no endpoint at all, or
// internalTrafficPolicy Local: no fallback, no entry (the cluster IP is
// internal traffic already, and nothing could serve the external ones).
func TestLocalPolicyNoEndpointsAnywhere(t *testing.T) {
	sp := etpLocal()
	st := Plan(cluster(nil, sp), dualOpts())
	for _, s := range fallbackServers {
		if vs := findVS(st, model.TCP, s.ip, s.port); vs == nil || len(vs.RealServers) != 0 {
			t.Errorf("%s:%d without endpoints: %+v, want a virtual server without real servers", s.ip, s.port, vs)
		}
	}
	eq(t, "KUBE-EXTERNAL-NO-LOCAL", entries(st, iptables.SetExternalNoLocal), []string{})

	itp := svc("internal", "10.96.0.31")
	itp.InternalPolicyLocal = true
	st = Plan(cluster(map[model.ServicePortName][]model.Endpoint{itp.Name: {ready("10.0.2.6", 80, "n2")}}, itp), opts())
	eq(t, "internalTrafficPolicy Local, no local endpoint", rsList(findVS(st, model.TCP, "10.96.0.31", 80)), []string{})
	eq(t, "KUBE-EXTERNAL-NO-LOCAL", entries(st, iptables.SetExternalNoLocal), []string{})
}

// TestLocalPolicyFilterRule: the filter rule admits this node's pod CIDR of
// each family (the Node's spec.podCIDRs), and only the node itself when the
// Node has none.
func TestLocalPolicyFilterRule(t *testing.T) {
	filterRule := func(st State, fam string) string {
		for _, rs := range st.Rulesets {
			if rs.Family != fam {
				continue
			}
			for _, tb := range rs.Tables {
				for _, c := range tb.Chains {
					for _, r := range c.Rules {
						if c.Name == iptables.ChainIPVSFilter && slices.Contains(r, iptables.SetName(iptables.SetExternalNoLocal, fam)) {
							return strings.Join(r, " ")
						}
					}
				}
			}
		}
		return ""
	}
	nodes := slices.Clone(testNodes)
	nodes[0].PodCIDRs = []netip.Prefix{pfx("10.0.1.0/24"), pfx("fd00:1::1:0/112")}
	c := cluster(nil, etpLocal())
	c.Nodes = nodes
	st := Plan(c, dualOpts())
	for fam, want := range map[string]string{
		iptables.FamilyIPv4: `! -s 10.0.1.0/24 -m comment --comment externalTrafficPolicy=local without local endpoints: only this node and its pods -m conntrack --ctstate NEW -m set --match-set KUBE-EXTERNAL-NO-LOCAL dst,dst -m addrtype ! --src-type LOCAL -j REJECT --reject-with icmp-port-unreachable`,
		iptables.FamilyIPv6: `! -s fd00:1::1:0/112 -m comment --comment externalTrafficPolicy=local without local endpoints: only this node and its pods -m conntrack --ctstate NEW -m set --match-set KUBE-6-EXTERNAL-NO-LOCAL dst,dst -m addrtype ! --src-type LOCAL -j REJECT --reject-with icmp6-port-unreachable`,
	} {
		if got := filterRule(st, fam); got != want {
			t.Errorf("%s filter rule with a pod CIDR:\n got %s\nwant %s", fam, got, want)
		}
	}
	st = Plan(cluster(nil, etpLocal()), dualOpts())
	if got := filterRule(st, iptables.FamilyIPv4); !strings.HasPrefix(got, "-m comment") {
		t.Errorf("filter rule of a Node without pod CIDRs: %q, want no source CIDR (the node itself only)", got)
	}
}
