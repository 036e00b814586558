package informers

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

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

// ConvertedService is ConvertedSlice's for a Service (cachedService).
func ConvertedService(obj any) *corev1.Service {
	switch o := obj.(type) {
	case *cachedService:
		return o.api()
	case *corev1.Service:
		return o
	}
	return nil
}
