package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Defaults of the planning flags, as kube-proxy's IPVS mode has them.
const (
	defaultScheduler     = "rr"
	defaultMasqueradeBit = 14
)

// addPlanningFlags registers the flags `plan` and `run` share, named and
// typed as kube-proxy's (and docs/flags.md) name them, and sets their
// defaults in o. Call validatePlanningOptions after parsing. The node's own
// identity (name, addresses, API server, gateways) is not here: run reads it
// from the node, plan takes it from its own flags (addNodeFlags).
func addPlanningFlags(fs *pflag.FlagSet, o *planner.Options) {
	o.Scheduler = defaultScheduler
	o.MasqueradeBit = defaultMasqueradeBit
	fs.Var(newPrefixList(&o.ClusterCIDRs, "string"), "cluster-cidr",
		"Comma-separated pod CIDRs, one per family: never service VIPs, and the source range treated as local traffic.")
	fs.Var(&nodePortAddrs{newPrefixList(&o.NodePortAddresses, "strings"), &o.NodePortPrimary}, "nodeport-addresses",
		"CIDRs of the local addresses NodePorts are served on, or primary: the node's primary IPs (its Node's first InternalIP, else ExternalIP, per family); empty means every local address except loopback and link-local (a CIDR naming link-local addresses serves them).")
	fs.StringVar(&o.Scheduler, "ipvs-scheduler", o.Scheduler,
		"Default IPVS scheduler (rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, mh); a Service may override it with the annotation ipvs-proxy.io/scheduler.")
	fs.Var(newPrefixList(&o.ExcludeCIDRs, "strings"), "ipvs-exclude-cidrs",
		"CIDRs whose IPVS virtual servers the proxy never plans, changes or deletes; a /32 or /128 inside found on kube-ipvs0 stays bound unless the guard protects it.")
	fs.BoolVar(&o.MasqueradeAll, "masquerade-all", false,
		"Masquerade all traffic sent to service addresses.")
	fs.IntVar(&o.MasqueradeBit, "iptables-masquerade-bit", o.MasqueradeBit,
		"The fwmark bit (0-31) that marks packets for masquerade (14 is mark 0x4000, as kube-proxy; alias --masquerade-bit).")
	fs.BoolVar(&o.RefuseNodeExternalIPs, "refuse-node-external-ips", false,
		"Refuse outright (no virtual server, no binding, no rule) an externalIP or LoadBalancer IP that is any node's address.")
	fs.Var(newPrefixList(&o.ProtectedCIDRs, "strings"), "protected-cidrs",
		"CIDRs that are never bound on kube-ipvs0.")
	fs.Var(newPrefixList(&o.ServiceCIDRs, "strings"), "service-cidrs",
		"The CIDRs the API server allocates ClusterIPs from (its --service-cluster-ip-range, and any ServiceCIDR objects): a Node address or pod range inside protects nothing, an endpoint inside is never a real server. Empty: only the Services' own ClusterIPs are checked.")
	fs.Var(newPrefixList(&o.PlatformCIDRs, "strings"), "protected-platform-cidrs",
		"Cloud platform addresses beyond the built-in ones (docs/security.md): never a service VIP, never a real server.")
	fs.StringSliceVar(&o.NodeEndpointNamespaces, "node-endpoint-namespaces", nil,
		"Namespaces whose Services may have endpoints on a node's or the API server's address at a --protected-node-ports port (default/kubernetes always may).")
	o.ProtectedNodePorts, _ = model.ParsePortRanges(guard.DefaultProtectedNodePorts)
	fs.Var(&portList{p: &o.ProtectedNodePorts}, "protected-node-ports",
		"Ports and port ranges of the node's own services that a node address served at L4 (a NodePort, an externalIP or LoadBalancer IP that is this node's address) never captures, besides the ports the node listens on; empty: only those.")
	o.MaxVirtualServersPerService = convert.DefaultMaxVirtualServers
	fs.IntVar(&o.MaxVirtualServersPerService, "max-virtual-servers-per-service", o.MaxVirtualServersPerService,
		"Most virtual servers one Service's externalIPs and LoadBalancer IPs may ask of every node ((addresses) × ports; also LoadBalancer IPs × ports × source ranges); the excess is refused (TooManyVirtualServers), keeping LoadBalancer IPs, then externalIPs, in order.")
	o.MaxRealServersPerService = convert.DefaultMaxRealServers
	fs.IntVar(&o.MaxRealServersPerService, "max-real-servers-per-service", o.MaxRealServersPerService,
		"Most real servers one Service may ask of every node (ports × endpoints × addresses); the excess endpoints are refused (TooManyRealServers), keeping ports in order.")
}

// addNodeFlags registers the flags that tell `plan` who the node is, which
// `run` learns from the node itself: its name, its addresses, the API server
// addresses and the default gateways.
func addNodeFlags(fs *pflag.FlagSet, o *planner.Options) {
	fs.StringVar(&o.NodeName, "node-name", "",
		"This node's name, as in its Node object; empty means the one Node in the input that has a --node-ip address.")
	fs.Var(&nodeIPList{&o.LocalAddrs, &o.LocalPrefixes}, "node-ip",
		"This node's addresses on interfaces other than kube-ipvs0 (required); ADDR/LEN (10.0.0.5/24, as `ip addr` shows it) also gives the subnet: its network and broadcast addresses, a /31's other end, and (without --ipvs-strict-arp) a warning for a VIP inside it.")
	fs.Var(newAddrList(&o.APIServerAddrs), "api-server-address",
		"Addresses of the host run dials (its kubeconfig's server, or KUBERNETES_SERVICE_HOST in a pod): never bound on kube-ipvs0 unless a Service in the input has it as its ClusterIP. The input's default/kubernetes EndpointSlices are protected as the API server too.")
	fs.Var(newAddrList(&o.Gateways), "gateway",
		"The node's default gateways; never bound on kube-ipvs0.")
	fs.Var(newAddrList(&o.NextHops), "next-hop",
		"The next hops of the node's other routes (ip route show table main); never bound on kube-ipvs0.")
	fs.Var(newAddrList(&o.Resolvers), "resolver",
		"The node's DNS servers (/etc/resolv.conf); never bound on kube-ipvs0 unless a Service in the input has it as its ClusterIP.")
	fs.BoolVar(&o.StrictARP, "ipvs-strict-arp", false,
		"As run's: the node does not answer ARP for kube-ipvs0 addresses, so a VIP inside a --node-ip subnet gets no warning.")
}

// validatePlanningOptions checks what a flag type alone cannot.
func validatePlanningOptions(o *planner.Options) error {
	if o.MasqueradeBit < 0 || o.MasqueradeBit > 31 {
		return fmt.Errorf("invalid argument %d for \"--iptables-masquerade-bit\" flag: must be 0-31", o.MasqueradeBit)
	}
	if o.MaxRealServersPerService < 1 {
		return fmt.Errorf("invalid argument %d for \"--max-real-servers-per-service\" flag: must be at least 1", o.MaxRealServersPerService)
	}
	if o.MaxVirtualServersPerService < 1 {
		return fmt.Errorf("invalid argument %d for \"--max-virtual-servers-per-service\" flag: must be at least 1", o.MaxVirtualServersPerService)
	}
	if !ipvs.KnownScheduler(o.Scheduler) {
		return fmt.Errorf("invalid argument %q for \"--ipvs-scheduler\" flag: must be one of %s",
			o.Scheduler, strings.Join(ipvs.Schedulers, ", "))
	}
	return nil
}

// joined is a flag value's list as --help shows it: comma-separated.
func joined[T fmt.Stringer](p *[]T) string {
	if p == nil {
		return ""
	}
	s := make([]string, len(*p))
	for i, x := range *p {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// addrList is a repeatable, comma-separated list of IP addresses.
type addrList struct{ p *[]netip.Addr }

func newAddrList(p *[]netip.Addr) *addrList { return &addrList{p} }

func (l *addrList) Type() string { return "strings" }

func (l *addrList) String() string { return joined(l.p) }

// Set takes an IPv4-mapped IPv6 address (::ffff:10.0.0.1) as the IPv4
// address it maps: the guard and the kernel know it only as that.
func (l *addrList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("%q is not an IP address", f)
		}
		*l.p = append(*l.p, a.Unmap())
	}
	return nil
}

// portList is a repeatable, comma-separated list of ports and port
// ranges; the first value given replaces the default.
type portList struct {
	p   *[]model.PortRange
	set bool
}

func (l *portList) Type() string { return "strings" }

func (l *portList) String() string { return joined(l.p) }

func (l *portList) Set(v string) error {
	rs, err := model.ParsePortRanges(v)
	if err != nil {
		return err
	}
	if !l.set {
		*l.p, l.set = nil, true
	}
	*l.p = append(*l.p, rs...)
	return nil
}

// nodeIPList is --node-ip: a repeatable, comma-separated list of addresses,
// each optionally with its prefix length (`ip -o addr show`'s form), which
// then also goes to prefixes.
type nodeIPList struct {
	addrs    *[]netip.Addr
	prefixes *[]netip.Prefix
}

func (l *nodeIPList) Type() string { return "strings" }

func (l *nodeIPList) String() string {
	if l.addrs == nil {
		return ""
	}
	return newAddrList(l.addrs).String()
}

func (l *nodeIPList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if !strings.Contains(f, "/") {
			if err := newAddrList(l.addrs).Set(f); err != nil {
				return err
			}
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil || p.Addr().Zone() != "" {
			return fmt.Errorf("%q is not an IP address or ADDR/LEN", f)
		}
		u, ok := guard.UnmapPrefix(p)
		if !ok {
			return fmt.Errorf("%q: %w", f, config.ErrMappedPrefix)
		}
		*l.addrs = append(*l.addrs, u.Addr())
		*l.prefixes = append(*l.prefixes, u)
	}
	return nil
}

// prefixList is a repeatable, comma-separated list of CIDRs. typ is what
// --help shows: "strings", or "string" for a flag kube-proxy takes as one
// comma-separated string.
type prefixList struct {
	p   *[]netip.Prefix
	typ string
}

func newPrefixList(p *[]netip.Prefix, typ string) *prefixList { return &prefixList{p, typ} }

func (l *prefixList) Type() string { return l.typ }

func (l *prefixList) String() string { return joined(l.p) }

// Set takes an IPv4-mapped IPv6 CIDR (::ffff:192.0.2.0/120) as the IPv4
// CIDR it maps (192.0.2.0/24), and rejects one shorter than /96.
func (l *prefixList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		p, err := config.ParseCIDR(f)
		if err != nil {
			return err
		}
		*l.p = append(*l.p, p)
	}
	return nil
}

// nodePortAddrs is --nodeport-addresses: CIDRs, or kube-proxy's single
// value "primary".
type nodePortAddrs struct {
	*prefixList
	primary *bool
}

func (l *nodePortAddrs) String() string {
	if *l.primary {
		return planner.NodePortPrimary
	}
	return l.prefixList.String()
}

func (l *nodePortAddrs) Set(v string) error {
	if strings.TrimSpace(v) == planner.NodePortPrimary {
		if len(*l.p) > 0 {
			return fmt.Errorf("%q: %w", v, config.ErrPrimaryWithCIDRs)
		}
		*l.primary = true
		return nil
	}
	if *l.primary {
		return fmt.Errorf("%q: %w", v, config.ErrPrimaryWithCIDRs)
	}
	return l.prefixList.Set(v)
}
