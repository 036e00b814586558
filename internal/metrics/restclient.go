package metrics

import (
	"strings"

	dto "github.com/prometheus/client_model/go"
	// client-go's rest_client_* metrics, as kube-proxy registers them
	// (component-base's adapters, into its legacy registry).
	_ "k8s.io/component-base/metrics/prometheus/restclient"

	"k8s.io/component-base/metrics/legacyregistry"
)

// restClientPrefix names the series restClientGatherer passes on.
const restClientPrefix = "rest_client_"

// restClientGatherer gathers client-go's rest_client_* series from
// component-base's legacy registry, where client-go's adapters record
// them; the rest of that registry (its own Go and process collectors) is
// left out, the proxy's registry has them.
type restClientGatherer struct{}

func (restClientGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), restClientPrefix) {
			out = append(out, mf)
		}
	}
	return out, err
}
