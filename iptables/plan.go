package iptables

import (
	"net/netip"
	"strconv"
	"strings"
)

// Families of a Ruleset and an IPSet.
const (
	FamilyIPv4 = "inet"
	FamilyIPv6 = "inet6"
)

// ipset types the proxy creates.
const (
	TypeHashIP        = "hash:ip"
	TypeHashIPPort    = "hash:ip,port"
	TypeHashIPPortIP  = "hash:ip,port,ip"
	TypeHashIPPortNet = "hash:ip,port,net"
	TypeBitmapPort    = "bitmap:port"
)

// IPv4 set names, as kube-proxy's IPVS mode names them. SetName gives the
// IPv6 names.
const (
	SetLoopBack        = "KUBE-LOOP-BACK"
	SetClusterIP       = "KUBE-CLUSTER-IP"
	SetExternalIP      = "KUBE-EXTERNAL-IP"
	SetExternalIPLocal = "KUBE-EXTERNAL-IP-LOCAL"
	// SetExternalNoLocal is the proxy's own (kube-proxy has no such set):
	// see SetSpecs.
	SetExternalNoLocal        = "KUBE-EXTERNAL-NO-LOCAL"
	SetLoadBalancer           = "KUBE-LOAD-BALANCER"
	SetLoadBalancerFW         = "KUBE-LOAD-BALANCER-FW"
	SetLoadBalancerLocal      = "KUBE-LOAD-BALANCER-LOCAL"
	SetLoadBalancerSourceIP   = "KUBE-LOAD-BALANCER-SOURCE-IP"
	SetLoadBalancerSourceCIDR = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
	SetNodePortTCP            = "KUBE-NODE-PORT-TCP"
	SetNodePortLocalTCP       = "KUBE-NODE-PORT-LOCAL-TCP"
	SetNodePortUDP            = "KUBE-NODE-PORT-UDP"
	SetNodePortLocalUDP       = "KUBE-NODE-PORT-LOCAL-UDP"
	SetNodePortSCTP           = "KUBE-NODE-PORT-SCTP-HASH"
	SetNodePortLocalSCTP      = "KUBE-NODE-PORT-LOCAL-SCTP-HASH"
	SetHealthCheckNodePort    = "KUBE-HEALTH-CHECK-NODE-PORT"
	SetIPVSIPs                = "KUBE-IPVS-IPS"
)

// SetSpec describes one of the proxy's ipsets.
type SetSpec struct {
	// Name is the IPv4 name.
	Name    string
	Type    string
	Comment string
}

// SetSpecs are every ipset the proxy owns, per family, sorted by Name. All of
// them always exist (possibly empty), so the iptables rules never change
// with the services. All but SetExternalNoLocal are kube-proxy's IPVS
// mode's, with its types; that one is unknown to kube-proxy, which leaves
// it unreferenced once its first sync rewrites the chains (migration.md).
var SetSpecs = []SetSpec{
	{SetClusterIP, TypeHashIPPort, "service cluster IP + port: masquerade and accept"},
	{SetExternalIP, TypeHashIPPort, "service external IP + port (externalTrafficPolicy Cluster)"},
	{SetExternalIPLocal, TypeHashIPPort, "service external IP + port with externalTrafficPolicy Local"},
	{SetExternalNoLocal, TypeHashIPPort, "node port, external IP or load balancer IP + port with externalTrafficPolicy Local and no endpoint on this node: served by the cluster's endpoints to this node and its pods only"},
	{SetHealthCheckNodePort, TypeBitmapPort, "health check node ports of externalTrafficPolicy Local services"},
	{SetIPVSIPs, TypeHashIP, "every address bound on kube-ipvs0"},
	{SetLoadBalancer, TypeHashIPPort, "service load balancer IP + port"},
	{SetLoadBalancerFW, TypeHashIPPort, "load balancer IP + port with loadBalancerSourceRanges"},
	{SetLoadBalancerLocal, TypeHashIPPort, "load balancer IP + port with externalTrafficPolicy Local"},
	{SetLoadBalancerSourceCIDR, TypeHashIPPortNet, "load balancer IP + port + allowed source range"},
	{SetLoadBalancerSourceIP, TypeHashIPPortIP, "load balancer IP + port + the node itself as allowed source"},
	{SetLoopBack, TypeHashIPPortIP, "endpoint IP + port + the same IP: hairpin traffic to masquerade"},
	{SetNodePortLocalSCTP, TypeHashIPPort, "node address + SCTP node port with externalTrafficPolicy Local"},
	{SetNodePortLocalTCP, TypeBitmapPort, "TCP node ports with externalTrafficPolicy Local"},
	{SetNodePortLocalUDP, TypeBitmapPort, "UDP node ports with externalTrafficPolicy Local"},
	{SetNodePortSCTP, TypeHashIPPort, "node address + SCTP node port"},
	{SetNodePortTCP, TypeBitmapPort, "TCP node ports"},
	{SetNodePortUDP, TypeBitmapPort, "UDP node ports"},
}

// KubeProxy reports whether kube-proxy's IPVS mode has the set too: all
// but SetExternalNoLocal.
func (s SetSpec) KubeProxy() bool { return s.Name != SetExternalNoLocal }

// maxSetName is IPSET_MAXNAMELEN - 1.
const maxSetName = 31

// SetName is the name of the IPv4 set name4 in family: unchanged for inet;
// for inet6 "KUBE-" becomes "KUBE-6-", cut to 31 characters, as kube-proxy
// names them (KUBE-LOAD-BALANCER-SOURCE-CIDR becomes
// KUBE-6-LOAD-BALANCER-SOURCE-CID).
func SetName(name4, family string) string {
	if family != FamilyIPv6 || !strings.HasPrefix(name4, "KUBE-") {
		return name4
	}
	n := "KUBE-6-" + name4[len("KUBE-"):]
	if len(n) > maxSetName {
		n = n[:maxSetName]
	}
	return n
}

// FamilyOf is the family an address belongs to.
func FamilyOf(a netip.Addr) string {
	if a.Is4() {
		return FamilyIPv4
	}
	return FamilyIPv6
}

// Chain names, as kube-proxy's IPVS mode names them.
const (
	ChainServices             = "KUBE-SERVICES"
	ChainPostrouting          = "KUBE-POSTROUTING"
	ChainMarkMasq             = "KUBE-MARK-MASQ"
	ChainNodePort             = "KUBE-NODE-PORT"
	ChainLoadBalancer         = "KUBE-LOAD-BALANCER"
	ChainForward              = "KUBE-FORWARD"
	ChainProxyFirewall        = "KUBE-PROXY-FIREWALL"
	ChainSourceRangesFirewall = "KUBE-SOURCE-RANGES-FIREWALL"
	ChainIPVSFilter           = "KUBE-IPVS-FILTER"
	// ChainIPVSOutFilter is kube-proxy's; the proxy does not plan it and
	// removes it (see KubeProxyChains).
	ChainIPVSOutFilter = "KUBE-IPVS-OUT-FILTER"
)

// RulesConfig is what the fixed rule set depends on. It never depends on the
// services: their data lives in the ipsets.
type RulesConfig struct {
	// Family is FamilyIPv4 (iptables) or FamilyIPv6 (ip6tables).
	Family string
	// MasqueradeBit is --masquerade-bit: the mark is 1<<MasqueradeBit.
	MasqueradeBit int
	// MasqueradeAll is --masquerade-all.
	MasqueradeAll bool
	// ClusterCIDR is this family's --cluster-cidr (pod range); traffic from
	// outside it to a cluster IP is masqueraded. Invalid (zero) when unset.
	ClusterCIDR netip.Prefix
	// NodePodCIDR is this family's pod CIDR of this node (the Node's
	// spec.podCIDRs): with the node itself, the only sources served at a
	// member of SetExternalNoLocal. Invalid (zero) when the Node has none:
	// then only the node itself is.
	NodePodCIDR netip.Prefix
	// NodePortAddrs are the addresses NodePorts are served on when
	// --nodeport-addresses is given; nil means every local address
	// (`-m addrtype --dst-type LOCAL`).
	NodePortAddrs []netip.Addr
}

// MasqueradeMark renders the mark for bit as iptables-save prints it: 0x4000.
func MasqueradeMark(bit int) string {
	if bit < 0 || bit > 31 {
		bit = 14
	}
	return "0x" + strconv.FormatUint(uint64(1)<<uint(bit), 16)
}

func comment(c string) []string { return []string{"-m", "comment", "--comment", c} }

func matchSet(name, dirs string) []string {
	return []string{"-m", "set", "--match-set", name, dirs}
}

func rule(parts ...[]string) Rule {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	r := make(Rule, 0, n)
	for _, p := range parts {
		r = append(r, p...)
	}
	return r
}

func jump(target string, opts ...string) []string {
	return append([]string{"-j", target}, opts...)
}

// Rules is the proxy's fixed rule set for one family, every rule already in
// the canonical form iptables-save prints back (matches in save order, marks
// as --set-xmark, REJECT with its --reject-with). Built-in chains hold only
// the proxy's jump rules. Chains are ordered built-in first (PREROUTING,
// INPUT, FORWARD, OUTPUT, POSTROUTING), then the proxy's own by name; tables
// are nat, then filter.
func Rules(c RulesConfig) Ruleset {
	w := newWords(c)
	return Ruleset{Family: c.Family, Tables: []Table{natTable(c, w), filterTable(c, w)}}
}

// words are what the rules of one family and masquerade bit are spelled
// with.
type words struct {
	set              func(name string) string
	mark, markMask   string
	loopback, reject string
}

func newWords(c RulesConfig) words {
	w := words{set: func(n string) string { return SetName(n, c.Family) }, mark: MasqueradeMark(c.MasqueradeBit),
		loopback: "127.0.0.0/8", reject: "icmp-port-unreachable"}
	w.markMask = w.mark + "/" + w.mark
	if c.Family == FamilyIPv6 {
		w.loopback, w.reject = "::1/128", "icmp6-port-unreachable"
	}
	return w
}

// natTable is the nat table: the portals' jumps, KUBE-SERVICES,
// KUBE-NODE-PORT, KUBE-LOAD-BALANCER, the masquerade mark and
// KUBE-POSTROUTING.
func natTable(c RulesConfig, w words) Table {
	set, mark, markMask := w.set, w.mark, w.markMask
	return Table{Name: "nat", Chains: []Chain{
		{Name: "PREROUTING", Builtin: true, Rules: []Rule{rule(comment("kubernetes service portals"), jump(ChainServices))}},
		{Name: "OUTPUT", Builtin: true, Rules: []Rule{rule(comment("kubernetes service portals"), jump(ChainServices))}},
		{Name: "POSTROUTING", Builtin: true, Rules: []Rule{rule(comment("kubernetes postrouting rules"), jump(ChainPostrouting))}},
		{Name: ChainLoadBalancer, Rules: []Rule{
			rule(comment("Kubernetes service load balancer ip + port with externalTrafficPolicy=local"), matchSet(set(SetLoadBalancerLocal), "dst,dst"), jump("RETURN")),
			rule(jump(ChainMarkMasq)),
		}},
		{Name: ChainMarkMasq, Rules: []Rule{rule(jump("MARK", "--set-xmark", markMask))}},
		{Name: ChainNodePort, Rules: nodePortRules(w)},
		{Name: ChainPostrouting, Rules: []Rule{
			rule(comment("Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"), matchSet(set(SetLoopBack), "dst,dst,src"), jump("MASQUERADE")),
			rule([]string{"-m", "mark", "!", "--mark", markMask}, jump("RETURN")),
			rule(jump("MARK", "--set-xmark", mark+"/0x0")),
			rule(comment("kubernetes service traffic requiring SNAT"), jump("MASQUERADE", "--random-fully")),
		}},
		{Name: ChainServices, Rules: serviceRules(c, w)},
	}}
}

// serviceRules is nat KUBE-SERVICES: what to masquerade and accept per
// kind of service address, and the jump to KUBE-NODE-PORT.
func serviceRules(c RulesConfig, w words) []Rule {
	set := w.set
	svc := []Rule{
		rule([]string{"-s", w.loopback}, jump("RETURN")),
		// Before the Local policy's RETURNs: the node's own traffic to an
		// address served by remote endpoints leaves with a source the
		// endpoint's node can answer (a kube-ipvs0 address is on every node).
		rule(comment("externalTrafficPolicy=local without local endpoints: masquerade traffic from the node itself"),
			matchSet(set(SetExternalNoLocal), "dst,dst"), []string{"-m", "addrtype", "--src-type", "LOCAL"}, jump(ChainMarkMasq)),
		rule(comment("Kubernetes service load balancer ip + port"), matchSet(set(SetLoadBalancer), "dst,dst"), jump(ChainLoadBalancer)),
	}
	clusterComment := comment("Kubernetes service cluster ip + port for masquerade purpose")
	switch {
	case c.MasqueradeAll:
		svc = append(svc, rule(clusterComment, matchSet(set(SetClusterIP), "dst,dst"), jump(ChainMarkMasq)))
	case c.ClusterCIDR.IsValid():
		svc = append(svc, rule([]string{"!", "-s", c.ClusterCIDR.Masked().String()}, clusterComment, matchSet(set(SetClusterIP), "dst,dst"), jump(ChainMarkMasq)))
	default:
		svc = append(svc, rule(clusterComment, matchSet(set(SetClusterIP), "src,dst"), jump(ChainMarkMasq)))
	}
	extComment := comment("Kubernetes service external ip + port for masquerade and filter purpose")
	extLocalComment := comment("Kubernetes service external ip + port with externalTrafficPolicy=local")
	offMachine := []string{"-m", "physdev", "!", "--physdev-is-in", "-m", "addrtype", "!", "--src-type", "LOCAL"}
	dstLocal := []string{"-m", "addrtype", "--dst-type", "LOCAL"}
	svc = append(svc,
		rule(extComment, matchSet(set(SetExternalIP), "dst,dst"), jump(ChainMarkMasq)),
		rule(extComment, matchSet(set(SetExternalIP), "dst,dst"), offMachine, jump("ACCEPT")),
		rule(extComment, matchSet(set(SetExternalIP), "dst,dst"), dstLocal, jump("ACCEPT")),
		rule(extLocalComment, matchSet(set(SetExternalIPLocal), "dst,dst"), offMachine, jump("ACCEPT")),
		rule(extLocalComment, matchSet(set(SetExternalIPLocal), "dst,dst"), dstLocal, jump("ACCEPT")),
	)
	if c.NodePortAddrs == nil {
		svc = append(svc, rule(dstLocal, jump(ChainNodePort)))
	} else {
		host := "/32"
		if c.Family == FamilyIPv6 {
			host = "/128"
		}
		for _, a := range c.NodePortAddrs {
			svc = append(svc, rule([]string{"-d", a.WithZone("").String() + host}, jump(ChainNodePort)))
		}
	}
	svc = append(svc,
		rule(matchSet(set(SetClusterIP), "dst,dst"), jump("ACCEPT")),
		rule(matchSet(set(SetLoadBalancer), "dst,dst"), jump("ACCEPT")),
	)
	return svc
}

// nodePortRules is nat KUBE-NODE-PORT: per protocol, Local NodePorts return
// unmarked, the others are marked for masquerade.
func nodePortRules(w words) []Rule {
	set := w.set
	var np []Rule
	for _, p := range []struct{ proto, set, local, dirs string }{
		{"tcp", SetNodePortTCP, SetNodePortLocalTCP, "dst"},
		{"udp", SetNodePortUDP, SetNodePortLocalUDP, "dst"},
		{"sctp", SetNodePortSCTP, SetNodePortLocalSCTP, "dst,dst"},
	} {
		up := strings.ToUpper(p.proto)
		np = append(np,
			rule([]string{"-p", p.proto}, comment("Kubernetes nodeport "+up+" port with externalTrafficPolicy=local"), matchSet(set(p.local), p.dirs), jump("RETURN")),
			rule([]string{"-p", p.proto}, comment("Kubernetes nodeport "+up+" port for masquerade purpose"), matchSet(set(p.set), p.dirs), jump(ChainMarkMasq)),
		)
	}
	return np
}

// ctNew matches a connection's first packet.
var ctNew = []string{"-m", "conntrack", "--ctstate", "NEW"}

// filterTable is the filter table: the health check and firewall jumps,
// KUBE-FORWARD, KUBE-IPVS-FILTER and the source ranges' firewall.
//
// The firewall (loadBalancerSourceRanges) sees a connection's first packet
// only, as in kube-proxy's iptables and nftables modes; its IPVS mode
// jumps there with every packet. Besides an ipset lookup per packet
// forwarded, that unconditional jump would cut connections on the way out
// to iptables mode: kube-proxy fills the chain, shared by name, with drops
// for the load balancer addresses that it means for new connections only,
// while IPVS still serves the open ones through INPUT.
func filterTable(c RulesConfig, w words) Table {
	set, markMask := w.set, w.markMask
	return Table{Name: "filter", Chains: []Chain{
		{Name: "INPUT", Builtin: true, Rules: []Rule{
			rule(comment("kubernetes health check rules"), jump(ChainNodePort)),
			rule(ctNew, comment("kube-proxy firewall rules"), jump(ChainProxyFirewall)),
			rule(comment("kubernetes ipvs access filter"), jump(ChainIPVSFilter)),
		}},
		{Name: "FORWARD", Builtin: true, Rules: []Rule{
			rule(ctNew, comment("kube-proxy firewall rules"), jump(ChainProxyFirewall)),
			rule(comment("kubernetes forwarding rules"), jump(ChainForward)),
		}},
		{Name: ChainForward, Rules: []Rule{
			rule(comment("kubernetes forwarding rules"), []string{"-m", "mark", "--mark", markMask}, jump("ACCEPT")),
			rule(comment("kubernetes forwarding conntrack rule"), []string{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"}, jump("ACCEPT")),
		}},
		{Name: ChainIPVSFilter, Rules: []Rule{
			noLocalFilter(c, w),
			rule(matchSet(set(SetLoadBalancer), "dst,dst"), jump("RETURN")),
			rule(matchSet(set(SetClusterIP), "dst,dst"), jump("RETURN")),
			rule(matchSet(set(SetExternalIP), "dst,dst"), jump("RETURN")),
			rule(matchSet(set(SetExternalIPLocal), "dst,dst"), jump("RETURN")),
			rule(matchSet(set(SetHealthCheckNodePort), "dst"), jump("RETURN")),
			rule(ctNew, matchSet(set(SetIPVSIPs), "dst"), jump("REJECT", "--reject-with", w.reject)),
		}},
		{Name: ChainNodePort, Rules: []Rule{
			rule(comment("Kubernetes health check node port"), matchSet(set(SetHealthCheckNodePort), "dst"), jump("ACCEPT")),
		}},
		{Name: ChainProxyFirewall, Rules: []Rule{
			rule(comment("Kubernetes service load balancer ip + port for load balancer with sourceRange"), matchSet(set(SetLoadBalancerFW), "dst,dst"), jump(ChainSourceRangesFirewall)),
		}},
		{Name: ChainSourceRangesFirewall, Rules: []Rule{
			rule(comment("Kubernetes service load balancer ip + port + source cidr for packet filter purpose"), matchSet(set(SetLoadBalancerSourceCIDR), "dst,dst,src"), jump("RETURN")),
			rule(comment("Kubernetes service load balancer ip + port + source IP for packet filter purpose"), matchSet(set(SetLoadBalancerSourceIP), "dst,dst,src"), jump("RETURN")),
			rule(jump("DROP")),
		}},
	}}
}

// noLocalFilter is the rule that keeps the members of SetExternalNoLocal,
// served by the cluster's endpoints, from external clients: a new
// connection from anything but the node itself and its own pods
// (NodePodCIDR) is rejected as IPVS rejects a virtual server without real
// servers (ICMP port unreachable), before IPVS sees it (filter INPUT runs
// before IPVS's LOCAL_IN hook). The node's own connections never reach it:
// IPVS takes them at LOCAL_OUT. NEW only, as the VIP filter's REJECT: the
// replies to the node's own connections pass whatever their port, and a
// connection an external client opened while the node had an endpoint
// keeps it until IPVS lets it go.
func noLocalFilter(c RulesConfig, w words) Rule {
	var notPods []string
	if c.NodePodCIDR.IsValid() {
		notPods = []string{"!", "-s", c.NodePodCIDR.Masked().String()}
	}
	return rule(notPods, comment("externalTrafficPolicy=local without local endpoints: only this node and its pods"),
		ctNew,
		matchSet(w.set(SetExternalNoLocal), "dst,dst"), []string{"-m", "addrtype", "!", "--src-type", "LOCAL"},
		jump("REJECT", "--reject-with", w.reject))
}

// EmptySets returns every set of SetSpecs for family, without entries, sorted
// by name.
func EmptySets(family string) []IPSet {
	out := make([]IPSet, len(SetSpecs))
	for i, s := range SetSpecs {
		out[i] = IPSet{Name: SetName(s.Name, family), Type: s.Type, Family: family, Comment: s.Comment}
	}
	sortSets(out)
	return out
}
