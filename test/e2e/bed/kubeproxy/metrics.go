package kubeproxy

import (
	"fmt"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the samples of a Prometheus text exposition: the value of
// each series by its name and labels as model.Metric.String prints them
// (`kubeproxy_sync_proxy_rules_last_timestamp_seconds`,
// `kubeproxy_sync_proxy_rules_duration_seconds_count`,
// `rest_client_requests_total{code="200", host="...", method="GET"}`).
type Metrics map[string]float64

// ParseMetrics parses a /metrics body. Histograms and summaries yield their
// _count and _sum series.
func ParseMetrics(text string) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := Metrics{}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			lbl := model.Metric{}
			for _, l := range m.GetLabel() {
				lbl[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
			}
			key := func(suffix string) string {
				c := lbl.Clone()
				c[model.MetricNameLabel] = model.LabelValue(name + suffix)
				return c.String()
			}
			switch {
			case m.Counter != nil:
				out[key("")] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key("")] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[key("")] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				out[key("_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key("_sum")] = m.GetHistogram().GetSampleSum()
			case m.Summary != nil:
				out[key("_count")] = float64(m.GetSummary().GetSampleCount())
				out[key("_sum")] = m.GetSummary().GetSampleSum()
			}
		}
	}
	return out, nil
}

// Sum adds every series of the metric name, whatever its labels (0 when
// there is none): kubeproxy_sync_proxy_rules_iptables_restore_failures_total
// over both families, or ipvs_proxy_apply_errors_total of a proxy of ours.
func (m Metrics) Sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}
