package informers

import "net/netip"

// The ClusterIPs of the cached Services, for the guard's trust order: a
// Node address that is a ClusterIP protects nothing (guard.TrustNodes).

// IsServiceIP reports whether a is the ClusterIP of a cached Service. The
// ClusterIPs are gathered by one scan of the cache at the first question
// after a Service changed, and kept until the next change: a full sync asks
// about the API server's addresses and the resolvers, a few times, and no
// index per Service is kept for it.
func (w *Watcher) IsServiceIP(a netip.Addr) bool { return w.ServiceIPs().Contains(a) }

// ServiceIPs are the ClusterIPs of the cached Services, sorted (read-only:
// shared until a Service changes), gathered as IsServiceIP says.
func (w *Watcher) ServiceIPs() AddrSet {
	w.mu.Lock()
	ips, ok, gen := w.svcIPs, w.svcIPsOK, w.svcGen
	w.mu.Unlock()
	if !ok {
		var all []netip.Addr
		for _, o := range w.svcInf.GetStore().List() {
			if svc := cachedServiceOf(o); svc != nil {
				all = append(all, svc.serviceIPs()...)
			}
		}
		ips = sortAddrs(all)
		w.mu.Lock()
		if w.svcGen == gen {
			// No Service changed during the scan.
			w.svcIPs, w.svcIPsOK = ips, true
		}
		w.mu.Unlock()
	}
	return ips
}
