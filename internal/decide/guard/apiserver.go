package guard

import (
	"net/netip"
	"slices"
)

// APIServer is what the proxy knows of the API server it talks to. Its
// Addrs are what the guard protects as "the API server".
//
// Two sources name the API server, and only one of them is trusted as is:
//
//   - Endpoints, the addresses of the default/kubernetes Service's
//     EndpointSlices (`kubectl get endpointslices -n default -l
//     kubernetes.io/service-name=kubernetes`): the API server instances
//     themselves, written by the API server.
//   - Dialed, the addresses of the host the proxy's client dials (the
//     kubeconfig's server, --master, or KUBERNETES_SERVICE_HOST in a pod).
//     In a pod that host is, by default, the kubernetes Service's ClusterIP
//     (10.96.0.1): a Service IP the proxy must program like any other, not
//     the API server. So a dialed address is the API server only when it is
//     not a Service IP.
type APIServer struct {
	// Endpoints are the addresses of the default/kubernetes EndpointSlices.
	Endpoints []netip.Addr
	// Dialed are the addresses of the host the proxy's client dials.
	Dialed []netip.Addr
	// InCluster is true when Dialed comes from the in-cluster configuration
	// (KUBERNETES_SERVICE_HOST). The kubelet sets it to the kubernetes
	// Service's ClusterIP unless the DaemonSet overrides it, so while the
	// Services are unknown (IsServiceIP nil) such an address is taken for
	// a Service IP and not protected; a kubeconfig's or --master's address
	// is protected until the Services say it is a Service IP.
	InCluster bool
	// IsServiceIP reports whether an address is the ClusterIP of a Service;
	// nil while the Services are unknown (before the informer caches
	// synced, or offline).
	IsServiceIP func(netip.Addr) bool
}

// Addrs are the addresses protected as the API server, sorted and without
// duplicates: every endpoint and every dialed address, except Service IPs
// (an address inside the service CIDR is never the API server) and, while
// the Services are unknown, the in-cluster dialed address.
func (s APIServer) Addrs() []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr, dialed bool) {
		if !a.IsValid() {
			return
		}
		a = a.WithZone("").Unmap()
		switch {
		case s.IsServiceIP != nil && s.IsServiceIP(a):
			return
		case s.IsServiceIP == nil && dialed && s.InCluster:
			return
		}
		out = append(out, a)
	}
	for _, a := range s.Endpoints {
		add(a, false)
	}
	for _, a := range s.Dialed {
		add(a, true)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
