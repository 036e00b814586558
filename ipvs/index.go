package ipvs

import (
	"slices"
	"strings"
)

// serviceIndex finds the mirrored virtual servers of the services a partial
// sync changed without a walk of the mirror: each key is filed under the
// two names ChangedMatcher accepts for its Service, the port name
// "namespace/name:port" and the Service key "namespace/name". A key whose
// Service is "" is not filed (ChangedMatcher matches no such server).
type serviceIndex map[string]map[Key]struct{}

// serviceNames are the names service is filed under.
func serviceNames(service string) []string {
	if service == "" {
		return nil
	}
	if i := strings.LastIndexByte(service, ':'); i >= 0 {
		return []string{service, service[:i]}
	}
	return []string{service}
}

// move files k under service instead of was.
func (x serviceIndex) move(k Key, was, service string) {
	if was == service {
		return
	}
	for _, n := range serviceNames(was) {
		if ks := x[n]; ks != nil {
			delete(ks, k)
			if len(ks) == 0 {
				delete(x, n)
			}
		}
	}
	for _, n := range serviceNames(service) {
		ks := x[n]
		if ks == nil {
			ks = make(map[Key]struct{}, 1)
			x[n] = ks
		}
		ks[k] = struct{}{}
	}
}

// lookup returns, sorted and once each, the keys filed under any of names.
// Each one's Service matches ChangedMatcher(names) if the index is current.
func (x serviceIndex) lookup(names []string) []Key {
	var out []Key
	for _, n := range names {
		for k := range x[n] {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, CompareKeys)
	return slices.Compact(out)
}

// setService records that the mirrored virtual server k (m) is service's.
func (r *Reconciler) setService(k Key, m *mirrorVS, service string) {
	r.byService.move(k, m.service, service)
	m.service = service
}

// forget drops k from the mirror.
func (r *Reconciler) forget(k Key) {
	if m := r.mirror[k]; m != nil {
		r.byService.move(k, m.service, "")
		delete(r.mirror, k)
	}
}
