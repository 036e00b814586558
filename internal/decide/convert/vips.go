package convert

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// LoadBalancerIPs are the ingress IPs of the LoadBalancer Services among
// svcs (LoadBalancerIPs(svcs).Contains is a Converter's IsLoadBalancerIP).
func LoadBalancerIPs(svcs []*corev1.Service) AddrSet {
	var out []netip.Addr
	for _, svc := range svcs {
		if svc != nil {
			out = append(out, IngressIPs(svc.Spec.Type, svc.Status.LoadBalancer.Ingress)...)
		}
	}
	return NewAddrSet(out)
}

// ExternalVIPs are the LoadBalancer IPs and externalIPs of svcs
// (ExternalVIPs(svcs).Contains is a Converter's IsExternalVIP).
func ExternalVIPs(svcs []*corev1.Service) AddrSet {
	out := []netip.Addr(LoadBalancerIPs(svcs))
	for _, svc := range svcs {
		if svc != nil {
			out = append(out, ParseAddrs(svc.Spec.ExternalIPs)...)
		}
	}
	return NewAddrSet(out)
}

// IngressIPs are the addresses of a Service's status.loadBalancer.ingress
// that parse, when it is of type LoadBalancer (the only type served on
// them); whatever their ipMode: a Proxy-mode address is still the load
// balancer's.
func IngressIPs(typ corev1.ServiceType, ing []corev1.LoadBalancerIngress) []netip.Addr {
	if typ != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	var out []netip.Addr
	for _, in := range ing {
		if a, err := ParseAddr(in.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// ParseAddrs are the addresses of raw that parse.
func ParseAddrs(raw []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range raw {
		if a, err := ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}
