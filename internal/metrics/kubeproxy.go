package metrics

import (
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// kubeProxySubsystem names kube-proxy's series: kubeproxy_*.
const kubeProxySubsystem = "kubeproxy"

// KubeProxy are the kubeproxy_* series kube-proxy 1.34 registers in IPVS
// mode (k8s.io/kubernetes pkg/proxy/metrics), with the same names, labels
// and buckets, so that kube-proxy's dashboards and alerts
// (kubernetes-mixin) read ipvs-proxy as they read kube-proxy. ip_family is
// each family the proxy serves (SetFamilies).
type KubeProxy struct {
	SyncDuration       *prometheus.HistogramVec
	LastSync           *prometheus.GaugeVec
	LastQueued         *prometheus.GaugeVec
	NetworkProgramming *prometheus.HistogramVec
	EndpointsPending   prometheus.Gauge
	EndpointsTotal     prometheus.Counter
	ServicesPending    prometheus.Gauge
	ServicesTotal      prometheus.Counter
	NoLocalEndpoints   *prometheus.GaugeVec
	HealthzTotal       *prometheus.CounterVec
	LivezTotal         *prometheus.CounterVec
	// RestoreFailures counts the syncs whose iptables-restore failed, per
	// family (RestoreFailed).
	RestoreFailures *prometheus.CounterVec
	// ConntrackSync and ConntrackDeleted are kube-proxy's conntrack
	// reconciler series, fed by each sync that deleted flows
	// (ConntrackReconciled).
	ConntrackSync    *prometheus.HistogramVec
	ConntrackDeleted *prometheus.CounterVec

	mu       sync.Mutex
	families []string
	// pending are the Services changed since the last sync, by kind.
	pendingServices, pendingEndpoints map[types.NamespacedName]bool
}

// kube-proxy's buckets.
var (
	syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)
	// networkProgrammingBuckets: 0.25s, 0.5s, 1s..59s, 60s..115s by 5s,
	// 120s..300s by 30s.
	networkProgrammingBuckets = slices.Concat(
		prometheus.LinearBuckets(0.25, 0.25, 2),
		prometheus.LinearBuckets(1, 1, 59),
		prometheus.LinearBuckets(60, 5, 12),
		prometheus.LinearBuckets(120, 30, 7))
)

func newKubeProxy() *KubeProxy {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Subsystem: kubeProxySubsystem, Name: name, Help: help}
	}
	hist := func(name, help string, buckets []float64) prometheus.HistogramOpts {
		return prometheus.HistogramOpts{Subsystem: kubeProxySubsystem, Name: name, Help: help, Buckets: buckets}
	}
	fam := []string{"ip_family"}
	return &KubeProxy{
		SyncDuration:       prometheus.NewHistogramVec(hist("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", syncBuckets), fam),
		LastSync:           prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced")), fam),
		LastQueued:         prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued")), fam),
		NetworkProgramming: prometheus.NewHistogramVec(hist("network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds", networkProgrammingBuckets), fam),
		EndpointsPending:   prometheus.NewGauge(prometheus.GaugeOpts(opts("sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes"))),
		EndpointsTotal:     prometheus.NewCounter(prometheus.CounterOpts(opts("sync_proxy_rules_endpoint_changes_total", "Cumulative proxy rules Endpoint changes"))),
		ServicesPending:    prometheus.NewGauge(prometheus.GaugeOpts(opts("sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes"))),
		ServicesTotal:      prometheus.NewCounter(prometheus.CounterOpts(opts("sync_proxy_rules_service_changes_total", "Cumulative proxy rules Service changes"))),
		NoLocalEndpoints:   prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("sync_proxy_rules_no_local_endpoints_total", "Number of services with a Local traffic policy and no endpoints")), []string{"traffic_policy", "ip_family"}),
		HealthzTotal:       prometheus.NewCounterVec(prometheus.CounterOpts(opts("proxy_healthz_total", "Cumulative proxy healthz HTTP status")), []string{"code"}),
		LivezTotal:         prometheus.NewCounterVec(prometheus.CounterOpts(opts("proxy_livez_total", "Cumulative proxy livez HTTP status")), []string{"code"}),
		RestoreFailures:    prometheus.NewCounterVec(prometheus.CounterOpts(opts("sync_proxy_rules_iptables_restore_failures_total", "Cumulative proxy iptables restore failures")), fam),
		ConntrackSync:      prometheus.NewHistogramVec(hist("conntrack_reconciler_sync_duration_seconds", "ReconcileConntrackFlowsLatency latency in seconds", syncBuckets), fam),
		ConntrackDeleted:   prometheus.NewCounterVec(prometheus.CounterOpts(opts("conntrack_reconciler_deleted_entries_total", "Cumulative conntrack flows deleted by conntrack reconciler")), fam),
		families:           []string{"IPv4"},
		pendingServices:    map[types.NamespacedName]bool{},
		pendingEndpoints:   map[types.NamespacedName]bool{},
	}
}

func (k *KubeProxy) collectors() []prometheus.Collector {
	return []prometheus.Collector{k.SyncDuration, k.LastSync, k.LastQueued, k.NetworkProgramming,
		k.EndpointsPending, k.EndpointsTotal, k.ServicesPending, k.ServicesTotal, k.NoLocalEndpoints,
		k.HealthzTotal, k.LivezTotal, k.RestoreFailures, k.ConntrackSync, k.ConntrackDeleted}
}

// SetFamilies sets the ip_family label values: IPv4, IPv6 or both.
func (k *KubeProxy) SetFamilies(families []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(families) > 0 {
		k.families = slices.Clone(families)
	}
	for _, f := range k.families {
		// Present at 0 from the start, as kube-proxy's.
		k.RestoreFailures.WithLabelValues(f)
	}
}

// RestoreFailed counts one sync whose iptables-restore of ipFamily (IPv4,
// IPv6) failed.
func (k *KubeProxy) RestoreFailed(ipFamily string) {
	k.RestoreFailures.WithLabelValues(ipFamily).Inc()
}

// ConntrackReconciled records one sync's conntrack flow deletions in
// ipFamily (IPv4, IPv6) as one round of kube-proxy's conntrack reconciler:
// their time and the flows deleted. Like kube-proxy's, the series appear
// with the first round.
func (k *KubeProxy) ConntrackReconciled(ipFamily string, seconds float64, deleted int) {
	k.ConntrackSync.WithLabelValues(ipFamily).Observe(seconds)
	k.ConntrackDeleted.WithLabelValues(ipFamily).Add(float64(deleted))
}

func (k *KubeProxy) eachFamily(f func(family string)) {
	k.mu.Lock()
	fams := slices.Clone(k.families)
	k.mu.Unlock()
	for _, fam := range fams {
		f(fam)
	}
}

// Change kinds of Queued.
const (
	ChangeService   = "service"
	ChangeEndpoints = "endpoints"
)

// Queued records one change of a Service (kind ChangeService) or of its
// EndpointSlices (ChangeEndpoints): the change counters, the pending
// gauges (Services with a change since the last sync) and the last queued
// time, as kube-proxy's change trackers.
func (k *KubeProxy) Queued(kind string, service types.NamespacedName) {
	k.mu.Lock()
	switch kind {
	case ChangeService:
		k.ServicesTotal.Inc()
		k.pendingServices[service] = true
		k.ServicesPending.Set(float64(len(k.pendingServices)))
	case ChangeEndpoints:
		k.EndpointsTotal.Inc()
		k.pendingEndpoints[service] = true
		k.EndpointsPending.Set(float64(len(k.pendingEndpoints)))
	}
	k.mu.Unlock()
	k.eachFamily(func(f string) { k.LastQueued.WithLabelValues(f).SetToCurrentTime() })
}

// synced records one sync: kube-proxy takes every pending change at the
// start of a sync, applied or not (a failed sync is retried whole).
func (k *KubeProxy) synced(seconds float64, ok bool) {
	k.mu.Lock()
	k.pendingServices = emptied(k.pendingServices)
	k.pendingEndpoints = emptied(k.pendingEndpoints)
	k.ServicesPending.Set(0)
	k.EndpointsPending.Set(0)
	k.mu.Unlock()
	k.eachFamily(func(f string) {
		k.SyncDuration.WithLabelValues(f).Observe(seconds)
		if ok {
			k.LastSync.WithLabelValues(f).SetToCurrentTime()
		}
	})
}

// emptied is m without entries: cleared when small, new when it held more
// than a sync usually takes. A cleared map keeps its buckets, and the
// first sync queues every Service and its slices, which the two maps
// would keep for good (TestPendingChangesFreed).
func emptied[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > 1024 {
		return map[K]V{}
	}
	clear(m)
	return m
}

// Answered counts one /healthz or /livez answer by status code.
func (k *KubeProxy) Answered(path string, code int) {
	c := k.HealthzTotal
	if path == "/livez" {
		c = k.LivezTotal
	}
	c.WithLabelValues(strconv.Itoa(code)).Inc()
}

// IPFamilies are the ip_family label values, IPv4 first.
var IPFamilies = [2]string{"IPv4", "IPv6"}

// SetNoLocalEndpoints sets the Services of ipFamily (IPv4, IPv6) whose
// internal or external Local traffic policy found no endpoint on this node
// while the Service has some elsewhere (planner.NoLocal), as kube-proxy's
// IPVS proxier counts them at every sync. A family the proxy does not
// serve is not exported, as kube-proxy has no proxier for it.
func (k *KubeProxy) SetNoLocalEndpoints(ipFamily string, internal, external int) {
	k.mu.Lock()
	served := slices.Contains(k.families, ipFamily)
	k.mu.Unlock()
	if !served {
		return
	}
	k.NoLocalEndpoints.WithLabelValues("internal", ipFamily).Set(float64(internal))
	k.NoLocalEndpoints.WithLabelValues("external", ipFamily).Set(float64(external))
}

// teeHistogram observes into the proxy's own histogram and kube-proxy's,
// under the first family's label.
type teeHistogram struct {
	prometheus.Histogram
	kp *KubeProxy
}

func (t teeHistogram) Observe(v float64) {
	t.Histogram.Observe(v)
	t.kp.mu.Lock()
	fam := t.kp.families[0]
	t.kp.mu.Unlock()
	t.kp.NetworkProgramming.WithLabelValues(fam).Observe(v)
}

// newBuildInfo is ipvs_proxy_build_info: 1, with the version and the Go
// version as labels.
func newBuildInfo(version string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
		Help: "ipvs-proxy's build: 1, labelled with its version and Go version."}, []string{"version", "goversion"})
	g.WithLabelValues(version, runtime.Version()).Set(1)
	return g
}
