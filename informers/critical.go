package informers

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// The cluster DNS Service, as kubeadm, kops, k3s, RKE2 and the managed
// clusters label it: the sync loop programs it first (critical Services).
const (
	// LabelClusterDNS with ClusterDNSValue marks the cluster DNS Service
	// in ClusterDNSNamespace.
	LabelClusterDNS     = "k8s-app"
	ClusterDNSValue     = "kube-dns"
	ClusterDNSNamespace = "kube-system"
)

// clusterDNSLabels are what a lean copy of a Service in
// ClusterDNSNamespace keeps of its labels: serviceLabels and
// LabelClusterDNS. Elsewhere the label is not read, and not kept.
var clusterDNSLabels = append(slices.Clip(serviceLabels), LabelClusterDNS)

// labelsKept are the labels a lean copy of a Service in namespace keeps.
func labelsKept(namespace string) []string {
	if namespace == ClusterDNSNamespace {
		return clusterDNSLabels
	}
	return serviceLabels
}

// ClusterDNS are the cached Services in ClusterDNSNamespace labelled
// LabelClusterDNS=ClusterDNSValue, sorted.
func (w *Watcher) ClusterDNS() []types.NamespacedName {
	var out []types.NamespacedName
	for _, svc := range w.cachedServices() {
		if svc.namespace == ClusterDNSNamespace && svc.more().labels[LabelClusterDNS] == ClusterDNSValue {
			out = append(out, svc.serviceName())
		}
	}
	slices.SortFunc(out, model.CompareServices)
	return out
}
