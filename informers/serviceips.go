package informers

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// The addresses the cached Services are served on, for the guard's trust
// order: a Node address that is a ClusterIP protects nothing
// (guard.TrustNodes), an externalIP that is another Service's ClusterIP or
// LoadBalancer IP is refused as a whole (Converter.IsLoadBalancerIP), and
// an endpoint on a Service VIP is no real server (Converter.IsExternalVIP).

// serviceVIPs are the cached Services' addresses by kind, each sorted.
type serviceVIPs struct {
	// cluster are the ClusterIPs, lb the LoadBalancer Services' ingress
	// IPs (status.loadBalancer.ingress), ext the externalIPs.
	cluster, lb, ext convert.AddrSet
}

// IsServiceIP reports whether a is the ClusterIP of a cached Service. The
// addresses are gathered by one scan of the cache at the first question
// after a Service changed, and kept until the next change: a full sync asks
// about the API server's addresses and the resolvers, a few times, and no
// index per Service is kept for it.
func (w *Watcher) IsServiceIP(a netip.Addr) bool { return w.vips().cluster.Contains(a) }

// ServiceIPs are the ClusterIPs of the cached Services, sorted (read-only:
// shared until a Service changes), gathered as IsServiceIP says.
func (w *Watcher) ServiceIPs() convert.AddrSet { return w.vips().cluster }

// IsLoadBalancerIP reports whether a is a cached LoadBalancer Service's
// ingress IP, gathered as IsServiceIP says.
func (w *Watcher) IsLoadBalancerIP(a netip.Addr) bool { return w.vips().lb.Contains(a) }

// IsExternalVIP reports whether a is a cached Service's LoadBalancer IP or
// externalIP, gathered as IsServiceIP says.
func (w *Watcher) IsExternalVIP(a netip.Addr) bool {
	v := w.vips()
	return v.lb.Contains(a) || v.ext.Contains(a)
}

// vips are the cached Services' addresses (read-only: shared until a
// Service changes).
func (w *Watcher) vips() serviceVIPs {
	w.mu.Lock()
	v, ok, gen := w.svcVIPs, w.svcVIPsOK, w.svcGen
	w.mu.Unlock()
	if ok {
		return v
	}
	var cluster, lb, ext []netip.Addr
	for _, o := range w.svcInf.GetStore().List() {
		if svc := cachedServiceOf(o); svc != nil {
			x := svc.more()
			cluster = append(cluster, svc.serviceIPs()...)
			lb = append(lb, convert.IngressIPs(corev1.ServiceType(svc.typ.Value()), x.ingress)...)
			ext = append(ext, convert.ParseAddrs(x.externalIPs)...)
		}
	}
	v = serviceVIPs{cluster: convert.NewAddrSet(cluster), lb: convert.NewAddrSet(lb), ext: convert.NewAddrSet(ext)}
	w.mu.Lock()
	if w.svcGen == gen {
		// No Service changed during the scan.
		w.svcVIPs, w.svcVIPsOK = v, true
	}
	w.mu.Unlock()
	return v
}
