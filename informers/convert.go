// Package informers turns Kubernetes API objects (core/v1 Service,
// discovery/v1 EndpointSlice, core/v1 Node) into the proxy's own model and
// watches them. This file is the pure conversion: it validates every field it
// uses and turns whatever it cannot use into a model.Refusal. It never
// panics on a malformed object, a bad field never affects another Service,
// and it never talks to the kernel.
package informers

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

// Well-known labels and annotations the conversion reads.
const (
	// LabelServiceName ties an EndpointSlice to its Service.
	LabelServiceName = discoveryv1.LabelServiceName
	// LabelServiceProxyName marks a Service handled by another proxy; such
	// Services are skipped, as kube-proxy does.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// AnnotationScheduler overrides --ipvs-scheduler for one Service.
	AnnotationScheduler = "ipvs-proxy.io/scheduler"
	// AnnotationSourceRanges is the legacy form of
	// spec.loadBalancerSourceRanges, used when the field is empty.
	AnnotationSourceRanges = corev1.AnnotationLoadBalancerSourceRangesKey
)

// Session affinity timeouts, as the API server defaults and bounds them.
const (
	DefaultAffinityTimeout = 10800
	MaxAffinityTimeout     = 86400
)

// Convert is Converter{}.Convert: the default limits.
func Convert(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node) model.Cluster {
	return Converter{}.Convert(svcs, eps, nodes)
}

// Convert is the whole-cluster conversion: every Service port, its
// endpoints from the EndpointSlices labelled with the Service's name, and
// every Node. Nil objects are ignored. The result is sorted and
// deterministic whatever the input order.
func (cv Converter) Convert(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node) model.Cluster {
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}}

	byService := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		if key := SliceServiceKey(s); key != "" {
			byService[key] = append(byService[key], s)
		}
	}
	for _, svc := range svcs {
		ports, refusals := cv.ServicePorts(svc)
		c.Refusals = append(c.Refusals, refusals...)
		if len(ports) == 0 {
			continue
		}
		c.Services = append(c.Services, ports...)
		m, refusals := ServiceEndpoints(ports, byService[ports[0].Name.ServiceKey()])
		c.Refusals = append(c.Refusals, refusals...)
		for k, v := range m {
			c.Endpoints[k] = v
		}
	}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		node, refusals := NodeFromObject(n)
		c.Nodes = append(c.Nodes, node)
		c.Refusals = append(c.Refusals, refusals...)
	}

	slices.SortFunc(c.Services, func(a, b model.ServicePort) int { return comparePortName(a.Name, b.Name) })
	slices.SortFunc(c.Nodes, func(a, b model.Node) int { return cmp.Compare(a.Name, b.Name) })
	SortRefusals(c.Refusals)
	return c
}

// SortRefusals sorts refusals by service, field, address, reason and message.
func SortRefusals(rs []model.Refusal) {
	slices.SortFunc(rs, func(a, b model.Refusal) int {
		return cmp.Or(
			cmp.Compare(a.Service, b.Service),
			cmp.Compare(a.Field, b.Field),
			cmp.Compare(a.Address, b.Address),
			cmp.Compare(a.Reason, b.Reason),
			cmp.Compare(a.Message, b.Message),
		)
	})
}

func comparePortName(a, b model.ServicePortName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Port, b.Port))
}

// ServiceKey is the "namespace/name" key of a Service.
func ServiceKey(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// SliceServiceKey is the "namespace/name" of the Service an EndpointSlice
// belongs to (label kubernetes.io/service-name), or "" when it has none.
func SliceServiceKey(s *discoveryv1.EndpointSlice) string {
	if s == nil {
		return ""
	}
	name := s.Labels[LabelServiceName]
	if name == "" {
		return ""
	}
	return s.Namespace + "/" + name
}

// SkipReason says why the proxy ignores a Service altogether, or "" when it
// does not. Skipped Services are not refusals: nothing is wrong with them,
// they are simply not for an IPVS proxy (as kube-proxy's ShouldSkipService).
func SkipReason(svc *corev1.Service) string {
	switch {
	case svc == nil:
		return "nil Service"
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "type ExternalName"
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "headless (clusterIP None)"
	}
	if name, ok := svc.Labels[LabelServiceProxyName]; ok {
		return fmt.Sprintf("label %s=%q: handled by another proxy", LabelServiceProxyName, name)
	}
	return ""
}

// refuser collects the refusals of one Service.
type refuser struct {
	service string
	out     []model.Refusal
}

// add records one refusal. The value is kept as written; every text
// layout renders it through model.Word, so an empty or odd value cannot
// add a word or a line.
func (r *refuser) add(field, value string, reason model.Reason, format string, args ...any) {
	r.out = append(r.out, model.Refusal{
		Service: r.service,
		Field:   field,
		Address: value,
		Reason:  reason,
		Message: fmt.Sprintf(format, args...),
	})
}

// Refusal field paths name the list for address lists (spec.externalIPs,
// as the planner does: the value identifies the entry) and the index for
// ports (spec.ports[2].protocol).

// ParseAddr parses one IP address as the API carries it: no zone, no
// surrounding junk. IPv4-mapped IPv6 addresses are kept as written; the
// guard refuses them.
func ParseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("ParseAddr(%q): zone not allowed", s)
	}
	return a, nil
}

// ServicePorts is Converter{}.ServicePorts: the default limits.
func ServicePorts(svc *corev1.Service) ([]model.ServicePort, []model.Refusal) {
	return Converter{}.ServicePorts(svc)
}

// ServicePorts converts one Service into one model.ServicePort per
// spec.ports entry, and the refusals for every field it cannot use. A
// skipped Service (see SkipReason) gives neither. A Service without any
// usable cluster IP gives no ports, only refusals. The Service's external
// addresses are capped (see Converter.MaxVirtualServers).
func (cv Converter) ServicePorts(svc *corev1.Service) ([]model.ServicePort, []model.Refusal) {
	if SkipReason(svc) != "" {
		return nil, nil
	}
	r := &refuser{service: ServiceKey(svc)}
	spec := &svc.Spec

	clusterIPs := convertClusterIPs(r, svc)
	if len(clusterIPs) == 0 {
		return nil, r.out
	}

	externallyAccessible := spec.Type == corev1.ServiceTypeNodePort ||
		spec.Type == corev1.ServiceTypeLoadBalancer || len(spec.ExternalIPs) > 0
	switch spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		r.add("spec.type", string(spec.Type), model.ReasonInvalidField,
			"unknown service type; treated as ClusterIP")
	}
	hasNodePorts := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer

	base := model.ServicePort{
		ClusterIPs:  clusterIPs,
		ExternalIPs: parseAddrList(r, "spec.externalIPs", spec.ExternalIPs),
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer {
		base.LoadBalancerIPs = convertIngress(r, svc.Status.LoadBalancer.Ingress)
		if len(base.LoadBalancerIPs) > 0 {
			base.LoadBalancerSourceRanges, base.LoadBalancerFirewall = convertSourceRanges(r, svc, base.LoadBalancerIPs)
		}
	}

	switch p := spec.ExternalTrafficPolicy; p {
	case "", corev1.ServiceExternalTrafficPolicyCluster:
	case corev1.ServiceExternalTrafficPolicyLocal:
		base.ExternalPolicyLocal = externallyAccessible
	default:
		r.add("spec.externalTrafficPolicy", string(p), model.ReasonInvalidField,
			"must be Cluster or Local; treated as Cluster")
	}
	switch p := spec.InternalTrafficPolicy; {
	case p == nil, *p == corev1.ServiceInternalTrafficPolicyCluster:
	case *p == corev1.ServiceInternalTrafficPolicyLocal:
		base.InternalPolicyLocal = true
	default:
		r.add("spec.internalTrafficPolicy", string(*p), model.ReasonInvalidField,
			"must be Cluster or Local; treated as Cluster")
	}
	if base.ExternalPolicyLocal && spec.Type == corev1.ServiceTypeLoadBalancer && spec.HealthCheckNodePort != 0 {
		if validPort(spec.HealthCheckNodePort) {
			base.HealthCheckNodePort = uint16(spec.HealthCheckNodePort)
		} else {
			r.add("spec.healthCheckNodePort", strconv.Itoa(int(spec.HealthCheckNodePort)), model.ReasonInvalidPort,
				"must be 1-65535; no health check port")
		}
	}

	switch spec.SessionAffinity {
	case "", corev1.ServiceAffinityNone:
	case corev1.ServiceAffinityClientIP:
		base.AffinityTimeout = DefaultAffinityTimeout
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t >= 1 && t <= MaxAffinityTimeout {
				base.AffinityTimeout = uint32(t)
			} else {
				r.add("spec.sessionAffinityConfig.clientIP.timeoutSeconds", strconv.Itoa(int(t)), model.ReasonInvalidField,
					"must be 1-%d; using the default %d seconds", MaxAffinityTimeout, DefaultAffinityTimeout)
			}
		}
	default:
		r.add("spec.sessionAffinity", string(spec.SessionAffinity), model.ReasonInvalidField,
			"must be None or ClientIP; no session affinity")
	}
	base.Scheduler = strings.TrimSpace(svc.Annotations[AnnotationScheduler])
	if td := spec.TrafficDistribution; td != nil {
		base.TrafficDistribution = *td
	}

	var out []model.ServicePort
	names := map[string]int{}
	for i := range spec.Ports {
		sp := &spec.Ports[i]
		field := fmt.Sprintf("spec.ports[%d]", i)
		if j, dup := names[sp.Name]; dup {
			r.add(field+".name", sp.Name, model.ReasonInvalidField,
				"port name already used by spec.ports[%d]; port not served", j)
			continue
		}
		names[sp.Name] = i
		proto, ok := convertProtocol(sp.Protocol)
		if !ok {
			r.add(field+".protocol", string(sp.Protocol), model.ReasonInvalidProtocol,
				"must be TCP, UDP or SCTP; port not served")
			continue
		}
		if !validPort(sp.Port) {
			r.add(field+".port", strconv.Itoa(int(sp.Port)), model.ReasonInvalidPort,
				"must be 1-65535; port not served")
			continue
		}
		p := base
		p.Name = model.ServicePortName{Namespace: svc.Namespace, Name: svc.Name, Port: sp.Name}
		p.Protocol = proto
		p.Port = uint16(sp.Port)
		switch {
		case sp.NodePort == 0:
		case !hasNodePorts:
			r.add(field+".nodePort", strconv.Itoa(int(sp.NodePort)), model.ReasonInvalidField,
				"only NodePort and LoadBalancer services have node ports; ignored")
		case !validPort(sp.NodePort):
			r.add(field+".nodePort", strconv.Itoa(int(sp.NodePort)), model.ReasonInvalidPort,
				"must be 1-65535; no node port for this port")
		default:
			p.NodePort = uint16(sp.NodePort)
		}
		out = append(out, p)
	}
	// The cap needs the number of ports; the address lists are copied
	// only after it, so a Service asking for millions of virtual servers
	// costs its size, not ports × addresses.
	lb, ext, ranges := cv.capExternal(r, svc, len(out), base.LoadBalancerIPs, base.ExternalIPs, base.LoadBalancerSourceRanges)
	for i := range out {
		// Every port gets its own copies, so that no consumer can alias
		// another port's slices.
		p := &out[i]
		p.ClusterIPs = slices.Clone(p.ClusterIPs)
		p.ExternalIPs = slices.Clone(ext)
		p.LoadBalancerIPs = slices.Clone(lb)
		p.LoadBalancerSourceRanges = slices.Clone(ranges)
	}
	return out, r.out
}

func validPort(p int32) bool { return p >= 1 && p <= 65535 }

func convertProtocol(p corev1.Protocol) (model.Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return model.TCP, true
	case corev1.ProtocolUDP:
		return model.UDP, true
	case corev1.ProtocolSCTP:
		return model.SCTP, true
	}
	return "", false
}

// convertClusterIPs reads spec.clusterIPs (or spec.clusterIP when the list
// is empty): at most one address per family, the primary first.
func convertClusterIPs(r *refuser, svc *corev1.Service) []netip.Addr {
	field, raw := "spec.clusterIPs", svc.Spec.ClusterIPs
	if len(raw) == 0 {
		if svc.Spec.ClusterIP == "" {
			r.add("spec.clusterIP", "", model.ReasonInvalidField,
				"no cluster IP allocated (a manifest never applied?); service not proxied")
			return nil
		}
		field, raw = "spec.clusterIP", []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range raw {
		f := field
		a, err := ParseAddr(s)
		if err != nil {
			r.add(f, s, model.ReasonInvalidAddress, "not an IP address; not served")
			continue
		}
		if slices.ContainsFunc(out, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			r.add(f, s, model.ReasonInvalidField, "a service has at most one cluster IP per family; not served")
			continue
		}
		out = append(out, a)
	}
	switch {
	case len(out) > 0:
	case len(raw) == 1:
		r.out[len(r.out)-1].Message = "not an IP address; service not proxied"
	default:
		r.add(field, strings.Join(raw, ","), model.ReasonInvalidAddress, "no usable cluster IP; service not proxied")
	}
	return out
}

// parseAddrList parses a list of addresses, dropping duplicates (in O(n):
// a Service may list tens of thousands).
func parseAddrList(r *refuser, field string, raw []string) []netip.Addr {
	var out []netip.Addr
	seen := make(map[netip.Addr]struct{}, len(raw))
	for _, s := range raw {
		a, err := ParseAddr(s)
		if err != nil {
			r.add(field, s, model.ReasonInvalidAddress, "not an IP address; not served")
			continue
		}
		if _, dup := seen[a]; !dup {
			seen[a] = struct{}{}
			out = append(out, a)
		}
	}
	return out
}

// convertIngress reads status.loadBalancer.ingress: entries with only a
// hostname carry no address for us, and ipMode Proxy entries are reached
// through the load balancer's own proxy, so neither gets a virtual server.
func convertIngress(r *refuser, ing []corev1.LoadBalancerIngress) []netip.Addr {
	var out []netip.Addr
	seen := make(map[netip.Addr]struct{}, len(ing))
	for _, in := range ing {
		if in.IP == "" {
			continue
		}
		if in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy {
			continue
		}
		a, err := ParseAddr(in.IP)
		if err != nil {
			r.add(FieldIngress, in.IP, model.ReasonInvalidAddress,
				"not an IP address; not served")
			continue
		}
		if _, dup := seen[a]; !dup {
			seen[a] = struct{}{}
			out = append(out, a)
		}
	}
	return out
}

// convertSourceRanges reads spec.loadBalancerSourceRanges, or the legacy
// annotation when the field is empty, for the LoadBalancer IPs lbIPs.
// firewall is true when ranges were given at all: the LoadBalancer IPs then
// admit only the ranges of their own family, and an IP left with none
// admits nobody (the planner fails closed; each such IP is refused here by
// name so that the Warning says so). An IPv4-mapped IPv6 range
// (::ffff:192.0.2.0/120) is read as the IPv4 range it maps (192.0.2.0/24),
// as kube-proxy's net.ParseCIDR reading does, and the refusal says so.
func convertSourceRanges(r *refuser, svc *corev1.Service, lbIPs []netip.Addr) (ranges []netip.Prefix, firewall bool) {
	field, raw := sourceRangesField(svc), svc.Spec.LoadBalancerSourceRanges
	if len(raw) == 0 {
		if v, has := svc.Annotations[AnnotationSourceRanges]; has && strings.TrimSpace(v) != "" {
			raw = strings.Split(v, ",")
		}
	}
	if len(raw) == 0 {
		return nil, false
	}
	var fam [2]bool
	seen := make(map[netip.Prefix]struct{}, len(raw))
	for _, s := range raw {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			r.add(field, s, model.ReasonInvalidSourceRange, "not a CIDR; this range is not allowed in")
			continue
		}
		p = p.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			r.add(field, s, model.ReasonIPv4Mapped,
				"IPv4-mapped IPv6 range; allowed in as the IPv4 range %s", p)
		}
		fam[addrFamily(p.Addr())] = true
		if _, dup := seen[p]; !dup {
			seen[p] = struct{}{}
			ranges = append(ranges, p)
		}
	}
	for _, ip := range lbIPs {
		if f := addrFamily(ip); !fam[f] {
			r.add(field, ip.String(), model.ReasonInvalidSourceRange,
				"no valid %s source range for this %s LoadBalancer IP; served with every source dropped (KUBE-LOAD-BALANCER-FW without a source entry), never opened to everyone",
				familyName[f], familyName[f])
		}
	}
	return ranges, true
}

// addrFamily is 0 for IPv4 (an IPv4-mapped address included), 1 for IPv6.
func addrFamily(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 0
	}
	return 1
}

var familyName = [2]string{"IPv4", "IPv6"}

// ServiceEndpoints gathers the endpoints of one Service's ports from that
// Service's EndpointSlices. Slice ports are matched to Service ports by name
// and protocol, so a named targetPort resolves per endpoint. Only slices of
// the Service's cluster IP families are used. An address that appears in
// several slices is taken from the first slice by name. Each port's
// endpoints are sorted by address and port.
func ServiceEndpoints(ports []model.ServicePort, eps []*discoveryv1.EndpointSlice) (map[model.ServicePortName][]model.Endpoint, []model.Refusal) {
	if len(ports) == 0 {
		return nil, nil
	}
	var v4, v6 bool
	for _, a := range ports[0].ClusterIPs {
		v4 = v4 || a.Is4()
		v6 = v6 || a.Is6()
	}
	want := map[string]model.Protocol{}
	for _, p := range ports {
		want[p.Name.Port] = p.Protocol
	}

	eps = slices.Clone(eps)
	slices.SortFunc(eps, func(a, b *discoveryv1.EndpointSlice) int {
		if a == nil || b == nil {
			return cmp.Compare(boolInt(a != nil), boolInt(b != nil))
		}
		return cmp.Compare(a.Name, b.Name)
	})

	type seenKey struct {
		addr netip.Addr
		port uint16
	}
	out := map[model.ServicePortName][]model.Endpoint{}
	seen := map[model.ServicePortName]map[seenKey]bool{}
	var refusals []model.Refusal
	for _, s := range eps {
		if s == nil {
			continue
		}
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
			if !v4 {
				continue
			}
		case discoveryv1.AddressTypeIPv6:
			if !v6 {
				continue
			}
		default: // FQDN slices name no address IPVS can use.
			continue
		}
		got, rs := EndpointsFromSlice(s)
		refusals = append(refusals, rs...)
		for _, sp := range got {
			proto, ok := want[sp.Name]
			if !ok || proto != sp.Protocol {
				continue
			}
			key := model.ServicePortName{Namespace: ports[0].Name.Namespace, Name: ports[0].Name.Name, Port: sp.Name}
			if seen[key] == nil {
				seen[key] = map[seenKey]bool{}
			}
			for _, e := range sp.Endpoints {
				k := seenKey{e.Address, e.Port}
				if seen[key][k] {
					continue
				}
				seen[key][k] = true
				out[key] = append(out[key], e)
			}
		}
	}
	for _, es := range out {
		slices.SortFunc(es, func(a, b model.Endpoint) int {
			return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port))
		})
	}
	return out, refusals
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SlicePort is what one port of one EndpointSlice contributes: the
// endpoints with that port's number.
type SlicePort struct {
	// Name is the slice port's name, matching the Service port's name.
	Name      string
	Protocol  model.Protocol
	Endpoints []model.Endpoint
}

// EndpointsFromSlice converts one EndpointSlice, without its Service: one
// SlicePort per valid slice port, each with every valid endpoint. Refusals
// name the Service of the slice (label kubernetes.io/service-name) and the
// field as "endpointSlice[NAME].endpoints[i].addresses[0]". Conditions are
// carried as the API defines them: ready nil means ready, serving nil means
// the same as ready, terminating nil means not terminating. Only the first
// address of an endpoint is used, as kube-proxy does.
func EndpointsFromSlice(s *discoveryv1.EndpointSlice) ([]SlicePort, []model.Refusal) {
	if s == nil {
		return nil, nil
	}
	service := SliceServiceKey(s)
	if service == "" {
		service = s.Namespace + "/"
	}
	r := &refuser{service: service}
	prefix := fmt.Sprintf("endpointSlice[%s]", s.Name)

	var ep []model.Endpoint
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		field := fmt.Sprintf("%s.endpoints[%d].addresses", prefix, i)
		if len(e.Addresses) == 0 {
			r.add(field, "", model.ReasonInvalidEndpoint, "endpoint has no address; not used")
			continue
		}
		field += "[0]"
		a, err := ParseAddr(e.Addresses[0])
		if err != nil {
			r.add(field, e.Addresses[0], model.ReasonInvalidAddress, "not an IP address; endpoint not used")
			continue
		}
		if (s.AddressType == discoveryv1.AddressTypeIPv4) != a.Is4() {
			r.add(field, e.Addresses[0], model.ReasonUnsupportedFamily,
				"address does not match the slice's addressType %q; endpoint not used", s.AddressType)
			continue
		}
		// The guard's never-a-VIP classes: addresses the API server itself
		// rejects (ValidateEndpointIP) and others no pod can have; a real
		// server there would send service traffic to the node or nowhere.
		if reason, why := guard.Special(a); reason != "" {
			r.add(field, e.Addresses[0], reason, "%s; endpoint not used", why)
			continue
		}
		ready := e.Conditions.Ready == nil || *e.Conditions.Ready
		serving := ready
		if e.Conditions.Serving != nil {
			serving = *e.Conditions.Serving
		}
		m := model.Endpoint{
			Address:     a,
			Ready:       ready,
			Serving:     serving,
			Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
		}
		if e.NodeName != nil {
			m.NodeName = *e.NodeName
		}
		if e.Zone != nil {
			m.Zone = *e.Zone
		}
		if h := e.Hints; h != nil {
			for _, z := range h.ForZones {
				m.ZoneHints = append(m.ZoneHints, z.Name)
			}
			for _, n := range h.ForNodes {
				m.NodeHints = append(m.NodeHints, n.Name)
			}
		}
		ep = append(ep, m)
	}

	var out []SlicePort
	for i, p := range s.Ports {
		field := fmt.Sprintf("%s.ports[%d]", prefix, i)
		var name string
		if p.Name != nil {
			name = *p.Name
		}
		proto := model.TCP
		if p.Protocol != nil {
			var ok bool
			if proto, ok = convertProtocol(*p.Protocol); !ok {
				r.add(field+".protocol", string(*p.Protocol), model.ReasonInvalidProtocol,
					"must be TCP, UDP or SCTP; slice port not used")
				continue
			}
		}
		if p.Port == nil {
			r.add(field+".port", "", model.ReasonInvalidPort, "no port number; slice port not used")
			continue
		}
		if !validPort(*p.Port) {
			r.add(field+".port", strconv.Itoa(int(*p.Port)), model.ReasonInvalidPort,
				"must be 1-65535; slice port not used")
			continue
		}
		sp := SlicePort{Name: name, Protocol: proto, Endpoints: make([]model.Endpoint, len(ep))}
		for j, e := range ep {
			e.Port = uint16(*p.Port)
			e.ZoneHints = slices.Clone(e.ZoneHints)
			e.NodeHints = slices.Clone(e.NodeHints)
			sp.Endpoints[j] = e
		}
		out = append(out, sp)
	}
	return out, r.out
}

// NodeFromObject converts one Node: its name, labels (zone included) and
// every address of status.addresses that reads as an IP, whatever its type
// (a Hostname, InternalDNS or ExternalDNS entry that is an IP literal is a
// node address too). Addresses are read leniently (guard.ParseLenient:
// trimmed, zone dropped, leading-zero octets as decimal, IPv4-mapped
// unmapped), because protecting too much is safe: an address not in
// canonical form is protected all the same and refused, with Service
// "Node/NAME", naming the form it was written in. An InternalIP or
// ExternalIP entry that is no address at all is refused and protects
// nothing; a name in a Hostname or DNS entry is skipped.
func NodeFromObject(n *corev1.Node) (model.Node, []model.Refusal) {
	if n == nil {
		return model.Node{}, nil
	}
	r := &refuser{service: "Node/" + n.Name}
	node := model.Node{Name: n.Name}
	if len(n.Labels) > 0 {
		node.Labels = make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			node.Labels[k] = v
		}
	}
	for i, a := range n.Status.Addresses {
		field := fmt.Sprintf("status.addresses[%d]", i)
		ip, canonical, ok := guard.ParseLenient(a.Address)
		switch {
		case !ok && (a.Type == corev1.NodeHostName || a.Type == corev1.NodeInternalDNS || a.Type == corev1.NodeExternalDNS):
			continue
		case !ok:
			r.add(field, a.Address, model.ReasonInvalidAddress, "not an IP address; not protected as a node address")
			continue
		case !canonical:
			r.add(field, a.Address, model.ReasonInvalidAddress,
				"not an IP address in canonical form; protected as node address %s all the same", ip)
		}
		if !slices.Contains(node.Addresses, ip) {
			node.Addresses = append(node.Addresses, ip)
		}
	}
	node.PrimaryIPs = primaryIPs(n.Status.Addresses)
	return node, r.out
}

// primaryIPs are the node IPs kube-proxy takes as the node's primary ones
// (k8s.io/component-helpers/node/util.GetNodeHostIPs): the InternalIPs,
// then the ExternalIPs, in order; the first of them, and the first of the
// other family after it.
func primaryIPs(as []corev1.NodeAddress) []netip.Addr {
	var out []netip.Addr
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range as {
			ip, _, ok := guard.ParseLenient(a.Address)
			if a.Type != typ || !ok {
				continue
			}
			if len(out) == 0 || (len(out) == 1 && ip.Is4() != out[0].Is4()) {
				out = append(out, ip)
			}
		}
	}
	return out
}
