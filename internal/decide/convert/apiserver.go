package convert

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
)

// APIServerEndpoints are the addresses of every endpoint (every address of
// each, not only the first) in the EndpointSlices of the default/kubernetes
// Service among eps, read leniently (guard.ParseLenient), sorted and
// without duplicates. The guard protects them as the API server. Slices of
// other Services are ignored, and so are values that are no address.
func APIServerEndpoints(eps []*discoveryv1.EndpointSlice) []netip.Addr {
	var out []netip.Addr
	for _, s := range eps {
		if n, _ := SliceService(s); n != guard.APIServerService {
			continue
		}
		for _, e := range s.Endpoints {
			for _, raw := range e.Addresses {
				if a, _, ok := guard.ParseLenient(raw); ok {
					out = append(out, a)
				}
			}
		}
	}
	return NewAddrSet(out)
}

// APIServerAddrs are the addresses api protects as the API server once
// the Services and the API server's EndpointSlices are known: its
// endpoints are those of eps (APIServerEndpoints), and an address is a
// Service IP when it is a ClusterIP of svcs (ServiceIPs). `plan` (from its
// input) and `recover` (from what the API server lists) use it; `run` asks
// its informer caches the same questions.
func APIServerAddrs(api guard.APIServer, svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice) []netip.Addr {
	api.Endpoints = APIServerEndpoints(eps)
	api.IsServiceIP = ServiceIPs(svcs).Contains
	return api.Addrs()
}

// AddrSet is a set of addresses, sorted and without duplicates.
type AddrSet []netip.Addr

// Contains reports whether a (zone dropped, IPv4-mapped unmapped) is in s.
func (s AddrSet) Contains(a netip.Addr) bool {
	_, found := slices.BinarySearchFunc(s, a.WithZone("").Unmap(), netip.Addr.Compare)
	return found
}

// ServiceIPs are the ClusterIPs of svcs (spec.clusterIPs, or spec.clusterIP
// when the list is empty): the addresses that are Service IPs, never the
// API server (ServiceIPs(svcs).Contains is a guard.APIServer's IsServiceIP).
func ServiceIPs(svcs []*corev1.Service) AddrSet {
	var out []netip.Addr
	for _, svc := range svcs {
		out = append(out, clusterIPsOf(svc)...)
	}
	return NewAddrSet(out)
}

// clusterIPsOf are one Service's ClusterIPs that parse.
func clusterIPsOf(svc *corev1.Service) []netip.Addr {
	if svc == nil {
		return nil
	}
	return ParseClusterIPs(svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
}

// ParseClusterIPs are the addresses of spec.clusterIPs, or of
// spec.clusterIP when the list is empty, that parse.
func ParseClusterIPs(clusterIP string, clusterIPs []string) []netip.Addr {
	raw := clusterIPs
	if len(raw) == 0 && clusterIP != "" {
		raw = []string{clusterIP}
	}
	var out []netip.Addr
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		// The API server never allocates a loopback, link-local, multicast
		// or unspecified ClusterIP: a Service naming one is refused for it
		// (guard.Special) and outranks nothing, not even in a conflict.
		a = a.WithZone("").Unmap()
		if reason, _ := guard.Special(a); reason == "" {
			out = append(out, a)
		}
	}
	return out
}

// NewAddrSet is the set of as: sorted, without duplicates (as is reused).
func NewAddrSet(as []netip.Addr) AddrSet {
	slices.SortFunc(as, netip.Addr.Compare)
	return slices.Compact(as)
}
