package convert

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// DefaultMaxVirtualServers is --max-virtual-servers-per-service's default.
const DefaultMaxVirtualServers = 1000

// DefaultMaxRealServers is --max-real-servers-per-service's default: ten
// times the 10,000 ports × endpoints the largest real workloads reach, and
// a bound on what one hostile Service costs every node
// (BenchmarkHostileRealServers).
const DefaultMaxRealServers = 100_000

// Converter holds the conversion's settings; the zero value uses the
// defaults.
type Converter struct {
	// MaxVirtualServers caps what one Service makes every node program for
	// its external addresses (--max-virtual-servers-per-service): its
	// LoadBalancer IPs and externalIPs times its ports in virtual servers,
	// and its LoadBalancer IPs times its ports times its source ranges in
	// KUBE-LOAD-BALANCER-SOURCE-CIDR entries. 0 or less means
	// DefaultMaxVirtualServers. ClusterIP and NodePort virtual servers are
	// not counted: a port has at most two cluster IPs and one NodePort
	// per node address.
	MaxVirtualServers int
	// MaxRealServers caps one Service's real servers on every node
	// (--max-real-servers-per-service): the sum over its ports of
	// endpoints × addresses. 0 or less means DefaultMaxRealServers.
	MaxRealServers int
	// IsServiceIP reports whether an address is a Service's ClusterIP:
	// such an endpoint is refused (an endpoint may not be a Service VIP).
	// Nil: Convert uses its own Services', ServiceEndpoints none.
	IsServiceIP func(netip.Addr) bool
	// IsLoadBalancerIP reports whether an address is a LoadBalancer
	// Service's ingress IP: an externalIP equal to another Service's is
	// refused as a whole. Nil: as IsServiceIP.
	IsLoadBalancerIP func(netip.Addr) bool
	// IsExternalVIP reports whether an address is a Service's
	// LoadBalancer IP or externalIP: an endpoint there is marked
	// (model.Endpoint.VIP) for the planner, which refuses it unless the
	// guard protects the address. Nil: as IsServiceIP.
	IsExternalVIP func(netip.Addr) bool
}

func (cv Converter) maxRealServers() int {
	if cv.MaxRealServers <= 0 {
		return DefaultMaxRealServers
	}
	return cv.MaxRealServers
}

// addressesOf counts what one port is served on for the real-server cap:
// its ClusterIPs, externalIPs and LoadBalancer IPs, and its NodePort as
// one (whatever the number of node addresses).
func addressesOf(sp *model.ServicePort) int {
	n := len(sp.ClusterIPs) + len(sp.ExternalIPs) + len(sp.LoadBalancerIPs)
	if sp.NodePort != 0 {
		n++
	}
	return max(n, 1)
}

// capRealServers decides, before any endpoint is built, which ports of a
// Service get none: whole ports are kept, in their order, while their
// endpoints (as many as the slices list for them) × addresses fit in
// --max-real-servers-per-service. It returns the names of the others, and
// the refusal that says so with the counts; nil, nil when all fit. It
// reads the slices' lengths only: a Service of 10,000 ports and a slice of
// 100 endpoints costs a count, not a million endpoints.
func (cv Converter) capRealServers(ports []model.ServicePort, eps []*discoveryv1.EndpointSlice) (map[string]bool, *model.Refusal) {
	counts := map[string]int{}
	for _, s := range eps {
		if s == nil {
			continue
		}
		for _, p := range s.Ports {
			if p.Name != nil {
				counts[*p.Name] += len(s.Endpoints)
			} else {
				counts[""] += len(s.Endpoints)
			}
		}
	}
	limit := cv.maxRealServers()
	total, kept := 0, 0
	var cut []string
	var cutNames map[string]bool
	for i := range ports {
		sp := &ports[i]
		n := counts[sp.Name.Port] * addressesOf(sp)
		total += n
		if kept+n <= limit {
			kept += n
			continue
		}
		if cutNames == nil {
			cutNames = map[string]bool{}
		}
		cutNames[sp.Name.Port] = true
		cut = append(cut, portName(sp))
	}
	if len(cut) == 0 {
		return nil, nil
	}
	return cutNames, &model.Refusal{Subject: model.ServiceSubject(ports[0].Name.NamespacedName), Field: "spec.ports", Address: cut[0],
		Reason: model.ReasonTooManyRealServers,
		Message: fmt.Sprintf("%d of %d ports get no real server (%s to %s, in port order): ports × endpoints × addresses would be %d real servers on every node, over --max-real-servers-per-service %d; the first ports that fit are served (%d real servers)",
			len(cut), len(ports), cut[0], cut[len(cut)-1], total, limit, kept)}
}

// portName names a port in the cap's refusal: its name, or PORT/PROTOCOL.
func portName(sp *model.ServicePort) string {
	if sp.Name.Port != "" {
		return sp.Name.Port
	}
	return fmt.Sprintf("%d/%s", sp.Port, sp.Protocol)
}

func (cv Converter) maxVirtualServers() int {
	if cv.MaxVirtualServers <= 0 {
		return DefaultMaxVirtualServers
	}
	return cv.MaxVirtualServers
}

// capExternal applies the cap to a Service with ports ports. Addresses
// are kept whole (an address is served on every port or on none) in a
// fixed order: the LoadBalancer IPs first, in status order (written by the
// load-balancer controller), then the externalIPs in spec order (written
// by whoever may edit the Service); the first ones that fit are kept.
// Then, if the kept LoadBalancer IPs × ports × source ranges are still
// over the cap, only the first ranges that fit (spec order) are kept: the
// sources of the others are dropped, never let in. One refusal per list
// cut names how many entries were dropped, the first and the last, and
// why.
func (cv Converter) capExternal(r *refuser, svc *corev1.Service, ports int, lb, ext []netip.Addr, ranges []netip.Prefix) ([]netip.Addr, []netip.Addr, []netip.Prefix) {
	limit := cv.maxVirtualServers()
	if ports == 0 {
		return lb, ext, ranges
	}
	if total := ports * (len(lb) + len(ext)); total > limit {
		keep := limit / ports
		keepLB := min(keep, len(lb))
		keepExt := min(keep-keepLB, len(ext))
		for _, cut := range []struct {
			field, what string
			list        []netip.Addr
			keep        int
		}{{FieldIngress, "LoadBalancer IPs", lb, keepLB}, {"spec.externalIPs", "externalIPs", ext, keepExt}} {
			if cut.keep == len(cut.list) {
				continue
			}
			dropped := cut.list[cut.keep:]
			r.add(cut.field, dropped[0].String(), model.ReasonTooManyVirtualServers,
				"%d of %d %s not served (%s to %s, in %s order): %d ports × %d addresses would be %d virtual servers on every node, over --max-virtual-servers-per-service %d; the first %d addresses (LoadBalancer IPs in status order, then externalIPs in spec order) are served on every port",
				len(dropped), len(cut.list), cut.what, dropped[0], dropped[len(dropped)-1], orderOf(cut.field),
				ports, len(lb)+len(ext), total, limit, keepLB+keepExt)
		}
		lb, ext = lb[:keepLB], ext[:keepExt]
	}
	if len(lb) == 0 || len(ranges) == 0 {
		return lb, ext, ranges
	}
	if total := ports * len(lb) * len(ranges); total > limit {
		keep := limit / (ports * len(lb))
		dropped := ranges[keep:]
		r.add(sourceRangesField(svc), dropped[0].String(), model.ReasonTooManyVirtualServers,
			"%d of %d source ranges not allowed in (%s to %s, in spec order): %d ports × %d LoadBalancer IPs × %d ranges would be %d firewall entries on every node, over --max-virtual-servers-per-service %d; only the first %d ranges are allowed in, the sources of the others are dropped (fail closed)",
			len(dropped), len(ranges), dropped[0], dropped[len(dropped)-1], ports, len(lb), len(ranges), total, limit, keep)
		ranges = ranges[:keep]
	}
	return lb, ext, ranges
}

// FieldIngress is the refusal field of a LoadBalancer IP.
const FieldIngress = "status.loadBalancer.ingress"

func orderOf(field string) string {
	if field == FieldIngress {
		return "status"
	}
	return "spec"
}

// sourceRangesField is where the Service's source ranges come from:
// spec.loadBalancerSourceRanges, or the legacy annotation when the field
// is empty.
func sourceRangesField(svc *corev1.Service) string {
	if len(svc.Spec.LoadBalancerSourceRanges) == 0 {
		return "metadata.annotations[" + AnnotationSourceRanges + "]"
	}
	return "spec.loadBalancerSourceRanges"
}
