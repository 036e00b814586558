package ipvs

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Changed names what a partial sync touches: a name without a port stands
// for every port of its Service (what the daemon passes: the Services the
// informers saw change), a name with one for that port alone.
type Changed []model.ServicePortName

// changedSet is Changed for lookups.
type changedSet struct {
	services map[types.NamespacedName]bool
	ports    map[model.ServicePortName]bool
}

func newChangedSet(c Changed) changedSet {
	s := changedSet{services: map[types.NamespacedName]bool{}, ports: map[model.ServicePortName]bool{}}
	for _, n := range c {
		if n.Port == "" {
			s.services[n.NamespacedName] = true
		} else {
			s.ports[n] = true
		}
	}
	return s
}

// has reports whether the service port n is one Changed names; the zero
// name (no service) never is.
func (s changedSet) has(n model.ServicePortName) bool {
	return !n.IsZero() && (s.services[n.NamespacedName] || s.ports[n])
}

// serviceIndex finds the mirrored virtual servers of the services a partial
// sync changed without a walk of the mirror: each key is filed under the
// Service of its service port. A key of no service is not filed (Changed
// never names it). A slice per Service, not a set: a few keys each (see
// BenchmarkMemoryBreakdown).
type serviceIndex map[types.NamespacedName][]Key

// move files k under service instead of was.
func (x serviceIndex) move(k Key, was, service model.ServicePortName) {
	if was == service {
		return
	}
	if !was.IsZero() {
		ks := slices.DeleteFunc(x[was.NamespacedName], func(o Key) bool { return o == k })
		if len(ks) == 0 {
			delete(x, was.NamespacedName)
		} else {
			x[was.NamespacedName] = ks
		}
	}
	if !service.IsZero() {
		x[service.NamespacedName] = append(x[service.NamespacedName], k)
	}
}

// lookup returns, sorted and once each, the keys filed under the Services
// of c: a superset of those c names, if the index is current.
func (x serviceIndex) lookup(c Changed) []Key {
	var out []Key
	for _, n := range c {
		out = append(out, x[n.NamespacedName]...)
	}
	slices.SortFunc(out, CompareKeys)
	return slices.Compact(out)
}

// setService records that the mirrored virtual server k (m) is service's.
func (r *Reconciler) setService(k Key, m *mirrorVS, service model.ServicePortName) {
	r.byService.move(k, m.service, service)
	m.service = service
}

// forget drops k from the mirror.
func (r *Reconciler) forget(k Key) {
	if m := r.mirror[k]; m != nil {
		r.byService.move(k, m.service, model.ServicePortName{})
		delete(r.mirror, k)
	}
}
