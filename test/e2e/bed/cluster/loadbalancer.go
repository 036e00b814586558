package cluster

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ProxyHealthzPort is the port of the proxy's own /healthz on every node
// (--healthz-bind-address, kube-proxy's 10256): what a cloud load
// balancer checks for a Service with externalTrafficPolicy Cluster.
const ProxyHealthzPort = 10256

// ErrLBPoolExhausted: every ingress address of the pool is taken.
var ErrLBPoolExhausted = errors.New("load balancer pool exhausted")

// LBPool hands out the ingress addresses of the bed's cloud load
// balancer, one per LoadBalancer Service, from a range of a prefix.
type LBPool struct {
	first, last netip.Addr
	byService   map[types.NamespacedName]netip.Addr
	taken       map[netip.Addr]bool
}

// NewLBPool is a pool of the addresses first..last (both included).
func NewLBPool(first, last netip.Addr) *LBPool {
	return &LBPool{first: first, last: last, byService: map[types.NamespacedName]netip.Addr{}, taken: map[netip.Addr]bool{}}
}

// Assign returns svc's ingress address: the one it has, or the lowest
// free one.
func (p *LBPool) Assign(svc types.NamespacedName) (netip.Addr, error) {
	if a, ok := p.byService[svc]; ok {
		return a, nil
	}
	for a := p.first; a.Compare(p.last) <= 0; a = a.Next() {
		if !p.taken[a] {
			p.byService[svc], p.taken[a] = a, true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("ingress for %s (%s-%s): %w", svc, p.first, p.last, ErrLBPoolExhausted)
}

// Release frees svc's address, if it has one, and returns it.
func (p *LBPool) Release(svc types.NamespacedName) (netip.Addr, bool) {
	a, ok := p.byService[svc]
	if ok {
		delete(p.byService, svc)
		delete(p.taken, a)
	}
	return a, ok
}

// Assigned returns the Services that hold an address.
func (p *LBPool) Assigned() []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(p.byService))
	for s := range p.byService {
		out = append(out, s)
	}
	return out
}

// CloudManages tells whether the bed's cloud load balancer serves svc: a
// LoadBalancer Service without a loadBalancerClass (one with a class is
// another controller's, as for a cloud's service controller).
func CloudManages(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}

// LBHealthPort is the port a cloud load balancer checks /healthz on, on
// every node, for svc: its healthCheckNodePort under externalTrafficPolicy
// Local (the proxy answers 200 only where a local endpoint is ready), and
// the proxy's own health port under Cluster, as GCE's and AWS's do.
func LBHealthPort(svc *corev1.Service) uint16 {
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort != 0 {
		return uint16(svc.Spec.HealthCheckNodePort)
	}
	return ProxyHealthzPort
}

// LBTargets are the nodes a cloud load balancer sends new connections
// to: those whose health check passes, in the order of nodes; all of them
// when none passes (fail open, as GCE's passthrough load balancers and
// AWS's target groups do).
func LBTargets(nodes []netip.Addr, passing map[netip.Addr]bool) []netip.Addr {
	var out []netip.Addr
	for _, n := range nodes {
		if passing[n] {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return append(out, nodes...)
	}
	return out
}
