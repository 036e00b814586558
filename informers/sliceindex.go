package informers

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// sliceIndex files the cached EndpointSlices by their Service (label
// kubernetes.io/service-name): what a sync reads of one Service. The
// EndpointSlice handler keeps it, in the informer's event order and before
// it marks the Service changed, so a sync of a changed Service reads at
// least that change. It replaces client-go's indexer, which keeps a set of
// keys per Service (a map each; see BenchmarkMemoryBreakdown); here a Service costs a map entry and a one-pointer
// array. Slices are filed by namespace and name: an update replaces the
// slice it follows.
type sliceIndex map[types.NamespacedName][]*cachedSlice

// move files cur (nil: a deletion) instead of old (nil: an addition).
func (x sliceIndex) move(old, cur *cachedSlice) {
	if old != nil {
		if n, ok := old.serviceName(); ok {
			ss := slices.DeleteFunc(x[n], func(s *cachedSlice) bool { return s.name == old.name })
			if len(ss) == 0 {
				delete(x, n)
			} else {
				x[n] = ss
			}
		}
	}
	if cur != nil {
		if n, ok := cur.serviceName(); ok {
			ss := x[n]
			if i := slices.IndexFunc(ss, func(s *cachedSlice) bool { return s.name == cur.name }); i >= 0 {
				ss[i] = cur
			} else {
				x[n] = append(ss, cur)
			}
		}
	}
}
