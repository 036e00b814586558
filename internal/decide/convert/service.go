package convert

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

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
	r := &refuser{subject: model.ServiceSubject(ServiceName(svc))}
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
		Created:     svc.CreationTimestamp.UTC(),
		ClusterIPs:  clusterIPs,
		ExternalIPs: parseAddrList(r, "spec.externalIPs", spec.ExternalIPs),
	}
	base.ExternalIPs = cv.notServiceIPs(r, "spec.externalIPs", base.ExternalIPs, clusterIPs)
	base.OthersLoadBalancerIPs = cv.othersLoadBalancerIPs(base.ExternalIPs, IngressIPs(spec.Type, svc.Status.LoadBalancer.Ingress))
	if spec.Type == corev1.ServiceTypeLoadBalancer {
		base.LoadBalancerIPs = cv.notServiceIPs(r, FieldIngress, convertIngress(r, svc.Status.LoadBalancer.Ingress), clusterIPs)
		if len(base.LoadBalancerIPs) > 0 {
			base.LoadBalancerSourceRanges, base.LoadBalancerFirewall = convertSourceRanges(r, svc, base.LoadBalancerIPs)
		}
	}

	base.ExternalPolicyLocal, base.InternalPolicyLocal, base.HealthCheckNodePort = trafficPolicies(r, svc, externallyAccessible)
	base.AffinityTimeout = sessionAffinity(r, spec)
	base.Scheduler = strings.TrimSpace(svc.Annotations[AnnotationScheduler])
	base.SchedulerFlags = strings.TrimSpace(svc.Annotations[AnnotationSchedulerFlags])
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
		p, ok := servicePort(r, svc, i, base, hasNodePorts)
		if !ok {
			continue
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
		p.OthersLoadBalancerIPs = slices.Clone(p.OthersLoadBalancerIPs)
		p.LoadBalancerIPs = slices.Clone(lb)
		p.LoadBalancerSourceRanges = slices.Clone(ranges)
	}
	return out, r.out
}

// trafficPolicies converts spec.externalTrafficPolicy (Local only matters
// for an externally accessible Service), spec.internalTrafficPolicy and,
// for a LoadBalancer with the Local policy, spec.healthCheckNodePort.
func trafficPolicies(r *refuser, svc *corev1.Service, externallyAccessible bool) (externalLocal, internalLocal bool, healthCheck uint16) {
	spec := &svc.Spec
	switch p := spec.ExternalTrafficPolicy; p {
	case "", corev1.ServiceExternalTrafficPolicyCluster:
	case corev1.ServiceExternalTrafficPolicyLocal:
		externalLocal = externallyAccessible
	default:
		r.add("spec.externalTrafficPolicy", string(p), model.ReasonInvalidField,
			"must be Cluster or Local; treated as Cluster")
	}
	switch p := spec.InternalTrafficPolicy; {
	case p == nil, *p == corev1.ServiceInternalTrafficPolicyCluster:
	case *p == corev1.ServiceInternalTrafficPolicyLocal:
		internalLocal = true
	default:
		r.add("spec.internalTrafficPolicy", string(*p), model.ReasonInvalidField,
			"must be Cluster or Local; treated as Cluster")
	}
	if externalLocal && spec.Type == corev1.ServiceTypeLoadBalancer && spec.HealthCheckNodePort != 0 {
		if validPort(spec.HealthCheckNodePort) {
			healthCheck = uint16(spec.HealthCheckNodePort)
		} else {
			r.add("spec.healthCheckNodePort", strconv.Itoa(int(spec.HealthCheckNodePort)), model.ReasonInvalidPort,
				"must be 1-65535; no health check port")
		}
	}
	return externalLocal, internalLocal, healthCheck
}

// sessionAffinity converts spec.sessionAffinity and its ClientIP timeout:
// the affinity timeout in seconds, 0 for none.
func sessionAffinity(r *refuser, spec *corev1.ServiceSpec) (timeout uint32) {
	switch spec.SessionAffinity {
	case "", corev1.ServiceAffinityNone:
	case corev1.ServiceAffinityClientIP:
		timeout = DefaultAffinityTimeout
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t >= 1 && t <= MaxAffinityTimeout {
				timeout = uint32(t)
			} else {
				r.add("spec.sessionAffinityConfig.clientIP.timeoutSeconds", strconv.Itoa(int(t)), model.ReasonInvalidField,
					"must be 1-%d; using the default %d seconds", MaxAffinityTimeout, DefaultAffinityTimeout)
			}
		}
	default:
		r.add("spec.sessionAffinity", string(spec.SessionAffinity), model.ReasonInvalidField,
			"must be None or ClientIP; no session affinity")
	}
	return timeout
}

// servicePort converts spec.ports[i] onto base (the Service's share of
// every port); false when the port is not served.
func servicePort(r *refuser, svc *corev1.Service, i int, base model.ServicePort, hasNodePorts bool) (model.ServicePort, bool) {
	sp := &svc.Spec.Ports[i]
	field := fmt.Sprintf("spec.ports[%d]", i)
	proto, ok := convertProtocol(sp.Protocol)
	if !ok {
		r.add(field+".protocol", string(sp.Protocol), model.ReasonInvalidProtocol,
			"must be TCP, UDP or SCTP; port not served")
		return model.ServicePort{}, false
	}
	if !validPort(sp.Port) {
		r.add(field+".port", strconv.Itoa(int(sp.Port)), model.ReasonInvalidPort,
			"must be 1-65535; port not served")
		return model.ServicePort{}, false
	}
	p := base
	p.Name = model.ServicePortName{NamespacedName: ServiceName(svc), Port: sp.Name}
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
	return p, true
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

// notServiceIPs are the addresses of as that are no other Service's
// ClusterIP (cv.IsServiceIP, own ClusterIPs aside): one that is is refused
// as a whole, on every port (AddressConflict), whatever the ports: the
// CVE-2020-8554 mitigation. A tenant's externalIP 10.96.0.10 would
// otherwise take every port of the cluster DNS's address that its
// Service does not serve itself.
func (cv Converter) notServiceIPs(r *refuser, field string, as, own []netip.Addr) []netip.Addr {
	if cv.IsServiceIP == nil {
		return as
	}
	return slices.DeleteFunc(as, func(a netip.Addr) bool {
		if slices.Contains(own, a) || isSpecial(a) || !cv.IsServiceIP(a) {
			return false
		}
		r.add(field, a.String(), model.ReasonAddressConflict,
			"the ClusterIP of another Service: refused on every port, whatever the ports (CVE-2020-8554)")
		return true
	})
}

// othersLoadBalancerIPs are the externalIPs of ext that are another
// Service's LoadBalancer IP (cv.IsLoadBalancerIP, own aside), for the
// planner to refuse as a whole, on every port (AddressConflict), as one
// equal to a ClusterIP, unless the guard protects it
// (model.ServicePort.OthersLoadBalancerIPs). A LoadBalancer IP is written
// through the status subresource by the load-balancer controller alone,
// an externalIP by whoever may edit the Service: the controller's word
// outranks it, and a tenant's externalIP never takes the ports of a load
// balancer's address its own Service does not serve (CVE-2020-8554).
// LoadBalancer IPs shared by Services (MetalLB's allow-shared-ip) are not
// refused: each address:proto:port goes to the oldest Service claiming it.
func (cv Converter) othersLoadBalancerIPs(ext, ownLB []netip.Addr) []netip.Addr {
	if cv.IsLoadBalancerIP == nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range ext {
		if !slices.Contains(ownLB, a) && !isSpecial(a) && cv.IsLoadBalancerIP(a) {
			out = append(out, a)
		}
	}
	return out
}

// isSpecial reports whether a is of a class the guard refuses whatever
// else it is (an IPv4-mapped address, say): its refusal says so.
func isSpecial(a netip.Addr) bool {
	reason, _ := guard.Special(a)
	return reason != ""
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
