package informers

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
)

// BenchmarkServiceEndpoints is one Service's conversion of its cached
// EndpointSlice of 10 endpoints, as a full sync converts every Service
// (Watcher.Service): what it allocates is the full sync's garbage.
//
//	go test -run '^$' -bench ServiceEndpoints -benchmem ./informers/
func BenchmarkServiceEndpoints(b *testing.B) {
	svc, _ := StripUnused(memService(7, memShapes[0]))
	sl, _ := StripUnused(memSlice(7, 10, memShapes[0]))
	ports, _ := convert.Converter{}.ServicePorts(svc.(*cachedService).api())
	cached := sl.(*cachedSlice)
	for b.Loop() {
		// As Watcher.Service: the cache entry rebuilt, then converted.
		if got, _ := convert.ServiceEndpoints(ports, []*discoveryv1.EndpointSlice{cached.api()}); len(got) != 1 {
			b.Fatal(got)
		}
	}
}
