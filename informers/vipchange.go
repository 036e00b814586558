package informers

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A Service's conversion reads the other Services' addresses: its
// externalIPs are refused when another Service has one as its ClusterIP or
// LoadBalancer IP, its endpoints are marked or refused when they are a
// Service VIP. So an event that adds or removes such an address marks
// changed every Service naming it, and the answer does not wait for that
// Service's own next change or a restart.

// fileService records the addresses a Service event adds to or removes
// from the Services' VIPs (ClusterIPs, LoadBalancer IPs, externalIPs):
// old is the Service the event replaces (nil for an addition), cur the new
// one (nil for a deletion). Most events change none (a Service's ports or
// policies change): they cost two short scans. A ClusterIP added or
// removed that a Node claims as its address changes the trust order too
// (guard.TrustNodes): the Nodes are trusted again at the next sync, as
// after a Node change (other cases, a pod range holding it, wait for the
// next full sync).
func (w *Watcher) fileService(old, cur any) {
	o, c := cachedServiceOf(old), cachedServiceOf(cur)
	was, now := vipsOf(o), vipsOf(c)
	var changed []netip.Addr
	for a := range was {
		if _, ok := now[a]; !ok {
			changed = append(changed, a)
		}
	}
	for a := range now {
		if _, ok := was[a]; !ok {
			changed = append(changed, a)
		}
	}
	if len(changed) == 0 {
		return
	}
	clusterIPs := func(svc *cachedService) []netip.Addr {
		if svc == nil {
			return nil
		}
		return svc.serviceIPs()
	}
	was4, now4 := clusterIPs(o), clusterIPs(c)
	w.mu.Lock()
	if !slices.Equal(was4, now4) && (w.nodeClaims(was4) || w.nodeClaims(now4)) {
		w.nodesChg = true
	}
	if w.vipChanged == nil {
		w.vipChanged = map[netip.Addr]struct{}{}
	}
	for _, a := range changed {
		w.vipChanged[a] = struct{}{}
	}
	w.mu.Unlock()
}

// nodeClaims reports whether a Node lists an address of as among its
// addresses; w.mu is held.
func (w *Watcher) nodeClaims(as []netip.Addr) bool {
	for _, addrs := range w.nodeView {
		for _, a := range as {
			if slices.Contains(addrs, a) {
				return true
			}
		}
	}
	return false
}

// vipsOf are the addresses svc is served on (nil: none).
func vipsOf(svc *cachedService) map[netip.Addr]struct{} {
	if svc == nil {
		return nil
	}
	x := svc.more()
	out := map[netip.Addr]struct{}{}
	for _, as := range [][]netip.Addr{svc.serviceIPs(), convert.IngressIPs(corev1.ServiceType(svc.typ.Value()), x.ingress), convert.ParseAddrs(x.externalIPs)} {
		for _, a := range as {
			out[a] = struct{}{}
		}
	}
	return out
}

// markNaming marks changed every cached Service that names an address of
// w.vipChanged as an externalIP, a LoadBalancer IP or an endpoint, and
// forgets them; w.mu is held. One walk of the caches per sync that follows
// such changes, however many there were.
func (w *Watcher) markNaming() {
	if len(w.vipChanged) == 0 {
		return
	}
	in := func(as []netip.Addr) bool {
		for _, a := range as {
			if _, ok := w.vipChanged[a]; ok {
				return true
			}
		}
		return false
	}
	mark := func(key types.NamespacedName) {
		if !w.dirty[key] {
			w.dirty[key] = true
			w.noteSeen()
		}
	}
	for _, o := range w.svcInf.GetStore().List() {
		if svc := cachedServiceOf(o); svc != nil {
			x := svc.more()
			if in(convert.ParseAddrs(x.externalIPs)) || in(convert.IngressIPs(corev1.ServiceType(svc.typ.Value()), x.ingress)) {
				mark(svc.serviceName())
			}
		}
	}
	for key, ss := range w.bySvc {
		for _, s := range ss {
			if s.names(w.vipChanged) {
				mark(key)
				break
			}
		}
	}
	w.vipChanged = nil
}

// names reports whether an endpoint of c has its address in set.
func (c *cachedSlice) names(set map[netip.Addr]struct{}) bool {
	for _, raw := range c.addresses {
		if a, err := convert.ParseAddr(raw); err == nil {
			if _, ok := set[a.Unmap()]; ok {
				return true
			}
		}
	}
	if c.addresses != nil {
		return false
	}
	for _, e := range c.endpoints {
		if e.flags&hasAddress == 0 {
			continue
		}
		if _, ok := set[netip.AddrFrom4(e.ip4)]; ok {
			return true
		}
	}
	return false
}
