package ipvs

import (
	"slices"
	"strings"
)

// serviceIndex finds the mirrored virtual servers of the services a partial
// sync changed without a walk of the mirror: each key is filed under the
// Service key ("namespace/name") of its Service ("namespace/name:port"),
// which is what every name ChangedMatcher accepts for it leads to. A key
// whose Service is "" is not filed (ChangedMatcher matches no such
// server). A slice per Service, not a set: a few keys each, and 10,000
// Services cost about a megabyte.
type serviceIndex map[string][]Key

// serviceKeyOf is the Service key of a Service or a changed name:
// "namespace/name" for "namespace/name:port" and for itself.
func serviceKeyOf(name string) string {
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		return name[:i]
	}
	return name
}

// move files k under service instead of was.
func (x serviceIndex) move(k Key, was, service string) {
	if was == service {
		return
	}
	if was != "" {
		sk := serviceKeyOf(was)
		ks := slices.DeleteFunc(x[sk], func(o Key) bool { return o == k })
		if len(ks) == 0 {
			delete(x, sk)
		} else {
			x[sk] = ks
		}
	}
	if service != "" {
		sk := serviceKeyOf(service)
		x[sk] = append(x[sk], k)
	}
}

// lookup returns, sorted and once each, the keys filed under the Service
// keys of names: a superset of those whose Service ChangedMatcher(names)
// matches, if the index is current.
func (x serviceIndex) lookup(names []string) []Key {
	var out []Key
	for _, n := range names {
		out = append(out, x[serviceKeyOf(n)]...)
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
