// Package metrics defines the proxy's Prometheus metrics and serves them on
// /metrics. It only counts; the sync loop decides what to record.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ipvs-proxy/ipvs-proxy/internal/version"
)

// Sync modes, the "mode" label.
const (
	ModeFull    = "full"
	ModePartial = "partial"
)

const namespace = "ipvs_proxy"

// Metrics are every metric the proxy exports, registered on their own registry.
type Metrics struct {
	Registry *prometheus.Registry

	// SyncDuration is the time of one sync, planning and applying, by mode.
	SyncDuration *prometheus.HistogramVec
	// NetworkProgrammingLatency is the time from an EndpointSlice's change
	// (annotation endpoints.kubernetes.io/last-change-trigger-time) to the
	// kernel holding it.
	NetworkProgrammingLatency prometheus.Histogram
	// PendingChanges is the number of services changed and not yet applied.
	PendingChanges prometheus.Gauge
	// VirtualServers, RealServers and Addresses are what the last sync
	// programmed: IPVS virtual servers, their real servers, kube-ipvs0 addresses.
	VirtualServers prometheus.Gauge
	RealServers    prometheus.Gauge
	Addresses      prometheus.Gauge
	// Refusals are the current refusals by reason.
	Refusals *prometheus.GaugeVec
	// ApplyErrors counts syncs that left something unapplied, by mode.
	ApplyErrors *prometheus.CounterVec
	// Syncs counts syncs by mode.
	Syncs *prometheus.CounterVec
	// LastSync is the Unix time of the last successful sync.
	LastSync prometheus.Gauge
	// DriftRepairs counts kernel state changed by others and put back, by
	// kind (the Drift* labels).
	DriftRepairs *prometheus.CounterVec
	// KubeProxy are kube-proxy's kubeproxy_* series, fed by the same
	// calls (ObserveSync, NetworkProgrammingLatency) and by the health and
	// watch hooks.
	KubeProxy *KubeProxy

	// serviceStats, once added, are written into /metrics by its handler.
	serviceStats *ServiceStats
}

// The kind labels of DriftRepairs.
const (
	DriftVirtualServer = "virtual_server"
	DriftAddress       = "address"
	DriftIPSetEntry    = "ipset_entry"
	DriftIPSet         = "ipset"
	DriftIPTablesTable = "iptables_table"
	DriftARPTable      = "arp_table"
)

// AddDriftRepairs adds repairs by kind label.
func (m *Metrics) AddDriftRepairs(byKind map[string]int) {
	for kind, n := range byKind {
		m.DriftRepairs.WithLabelValues(kind).Add(float64(n))
	}
}

// New creates the metrics on a fresh registry, with Go and process metrics.
func New() *Metrics {
	// Buckets from 1 ms to about 65 s, as network programming and a full
	// sync at 10,000 services both fit.
	buckets := prometheus.ExponentialBuckets(0.001, 2, 17)
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "sync_duration_seconds",
			Help:    "Time of one sync (plan and apply), by mode: full (reads the kernel and repairs drift) or partial (changed services only).",
			Buckets: buckets,
		}, []string{"mode"}),
		NetworkProgrammingLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "network_programming_duration_seconds",
			Help:    "Time from an EndpointSlice change (endpoints.kubernetes.io/last-change-trigger-time) until the kernel holds it.",
			Buckets: buckets,
		}),
		PendingChanges: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "pending_changes",
			Help: "Services changed and not yet applied.",
		}),
		VirtualServers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "virtual_servers",
			Help: "IPVS virtual servers the proxy programs.",
		}),
		RealServers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "real_servers",
			Help: "IPVS real servers the proxy programs.",
		}),
		Addresses: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "addresses",
			Help: "Addresses the proxy binds on kube-ipvs0.",
		}),
		Refusals: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "refusals",
			Help: "Current refusals (addresses or fields the proxy would not program), by reason.",
		}, []string{"reason"}),
		ApplyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "apply_errors_total",
			Help: "Syncs that could not apply everything (retried with backoff), by mode.",
		}, []string{"mode"}),
		Syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "syncs_total",
			Help: "Syncs run, by mode.",
		}, []string{"mode"}),
		LastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "last_sync_timestamp_seconds",
			Help: "Unix time of the last sync that applied everything.",
		}),
		KubeProxy: newKubeProxy(),
		DriftRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "drift_repairs_total",
			Help: "Kernel state changed outside the proxy and repaired, by kind: virtual servers deleted, added or edited; kube-ipvs0 addresses added or removed; ipset entries; ipsets destroyed; iptables tables whose chains or jumps were edited.",
		}, []string{"kind"}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.SyncDuration, m.NetworkProgrammingLatency, m.PendingChanges,
		m.VirtualServers, m.RealServers, m.Addresses, m.Refusals,
		m.ApplyErrors, m.Syncs, m.LastSync, m.DriftRepairs,
		newBuildInfo(version.Version),
	)
	m.Registry.MustRegister(m.KubeProxy.collectors()...)
	// kube-proxy's network programming histogram is fed with the proxy's.
	m.NetworkProgrammingLatency = teeHistogram{m.NetworkProgrammingLatency, m.KubeProxy}
	for _, k := range []string{DriftVirtualServer, DriftAddress, DriftIPSetEntry, DriftIPSet, DriftIPTablesTable, DriftARPTable} {
		m.DriftRepairs.WithLabelValues(k)
	}
	for _, mode := range []string{ModeFull, ModePartial} {
		m.ApplyErrors.WithLabelValues(mode)
		m.Syncs.WithLabelValues(mode)
	}
	return m
}

// SetRefusals replaces the refusal gauges with the given counts by reason.
func (m *Metrics) SetRefusals(byReason map[string]int) {
	m.Refusals.Reset()
	for r, n := range byReason {
		m.Refusals.WithLabelValues(r).Set(float64(n))
	}
}

// ObserveSync records one sync of the given mode.
func (m *Metrics) ObserveSync(mode string, d time.Duration, ok bool) {
	m.KubeProxy.synced(d.Seconds(), ok)
	m.Syncs.WithLabelValues(mode).Inc()
	m.SyncDuration.WithLabelValues(mode).Observe(d.Seconds())
	if ok {
		m.LastSync.SetToCurrentTime()
	} else {
		m.ApplyErrors.WithLabelValues(mode).Inc()
	}
}

// Handler serves /metrics: the proxy's registry and client-go's
// rest_client_* series (restclient.go).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	g := prometheus.Gatherers{m.Registry, restClientGatherer{}}
	if m.serviceStats != nil {
		mux.Handle("/metrics", statsHandler(g, m.serviceStats))
	} else {
		mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	return mux
}
