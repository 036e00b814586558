package informers

import discoveryv1 "k8s.io/api/discovery/v1"

// ConvertedSlice is the EndpointSlice the conversion reads of what the
// informers' transform returned for one (a cachedSlice rebuilt, as
// Watcher.Service rebuilds it), or obj itself when it is one; nil for
// anything else.
func ConvertedSlice(obj any) *discoveryv1.EndpointSlice {
	switch o := obj.(type) {
	case *cachedSlice:
		return o.api()
	case *discoveryv1.EndpointSlice:
		return o
	}
	return nil
}
