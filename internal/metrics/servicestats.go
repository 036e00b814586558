package metrics

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The per-Service IPVS statistics (docs/operations.md): the counters the
// periodic full sync's read of the IPVS table already holds, kept as a
// snapshot (ipvs.StatsOptions) and turned into series at the first scrape
// after it. A scrape never reads the kernel.

// DefaultServiceStatsMaxSeries is --service-stats-max-series' default:
// seven series per Service port and address kind, so about 1,400 of them
// per node.
const DefaultServiceStatsMaxSeries = 10000

// seriesPerGroup are the series of one Service port and kind:
// connections, packets and bytes in and out, active and inactive.
const seriesPerGroup = 7

var (
	serviceLabels    = []string{"namespace", "service", "port", "kind"}
	directionLabels  = append(slices.Clone(serviceLabels), "direction")
	realServerLabels = append(slices.Clone(serviceLabels), "real_server")

	descConnections = prometheus.NewDesc(namespace+"_service_connections_total",
		"Connections IPVS scheduled to a Service port's virtual servers of one address kind, summed over them (both families).", serviceLabels, nil)
	descPackets = prometheus.NewDesc(namespace+"_service_packets_total",
		"Packets through a Service port's virtual servers of one address kind, by direction: in (to the real servers), out (their replies).", directionLabels, nil)
	descBytes = prometheus.NewDesc(namespace+"_service_bytes_total",
		"Bytes through a Service port's virtual servers of one address kind, by direction: in (to the real servers), out (their replies).", directionLabels, nil)
	descActive = prometheus.NewDesc(namespace+"_service_active_connections",
		"Active connections (ipvsadm's ActiveConn) of a Service port's virtual servers of one address kind, summed over their real servers.", serviceLabels, nil)
	descInactive = prometheus.NewDesc(namespace+"_service_inactive_connections",
		"Inactive connection entries (ipvsadm's InActConn) of a Service port's virtual servers of one address kind, summed over their real servers.", serviceLabels, nil)
	descRSActive = prometheus.NewDesc(namespace+"_real_server_active_connections",
		"Active connections of one real server (ADDRESS:PORT) of a Service port's virtual servers of one kind (--service-stats-real-servers).", realServerLabels, nil)
	descRSInactive = prometheus.NewDesc(namespace+"_real_server_inactive_connections",
		"Inactive connection entries of one real server of a Service port's virtual servers of one kind (--service-stats-real-servers).", realServerLabels, nil)
	descAge = prometheus.NewDesc(namespace+"_service_stats_age_seconds",
		"Age of the IPVS read the per-Service statistics come from (the periodic full sync's, every --sync-period).", nil, nil)
)

// ServiceStats serves the per-Service statistics of the last snapshot.
// Publish is called on the sync loop; Collect on the scrape's goroutine.
type ServiceStats struct {
	maxSeries   int
	realServers bool
	clock       clock.PassiveClock
	omitted     prometheus.Counter

	mu   sync.Mutex
	snap *ipvs.StatsSnapshot
	// series are snap's series once a scrape built them.
	series []prometheus.Metric
}

// NewServiceStats returns the statistics' collector, serving at most
// maxSeries series (each real server's included), counting the rest in
// ipvs_proxy_service_stats_series_omitted_total; realServers adds each
// real server's connections. clk nil is the real clock.
func NewServiceStats(maxSeries int, realServers bool, clk clock.PassiveClock) *ServiceStats {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &ServiceStats{maxSeries: maxSeries, realServers: realServers, clock: clk,
		omitted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "service_stats_series_omitted_total",
			Help: "Per-Service statistics series left out by --service-stats-max-series, counted once for each IPVS read served."})}
}

// Options are the reconciler's statistics options that feed s.
func (s *ServiceStats) Options() ipvs.StatsOptions {
	return ipvs.StatsOptions{Publish: s.Publish, RealServers: s.realServers}
}

// Publish replaces the snapshot; the next scrape builds its series.
func (s *ServiceStats) Publish(snap *ipvs.StatsSnapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap, s.series = snap, nil
}

// Describe implements prometheus.Collector.
func (s *ServiceStats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnections, descPackets, descBytes, descActive, descInactive, descAge} {
		ch <- d
	}
	if s.realServers {
		ch <- descRSActive
		ch <- descRSInactive
	}
	s.omitted.Describe(ch)
}

// Collect implements prometheus.Collector: the snapshot's series, built
// at the first scrape after Publish, and its age.
func (s *ServiceStats) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	if s.snap != nil && s.series == nil {
		var omitted int
		s.series, omitted = s.build(s.snap)
		s.omitted.Add(float64(omitted))
	}
	series, snap := s.series, s.snap
	s.mu.Unlock()
	for _, m := range series {
		ch <- m
	}
	if snap != nil {
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, s.clock.Since(snap.Read).Seconds())
	}
	s.omitted.Collect(ch)
}

// statsGroup is one Service port and kind: the sum over its virtual
// servers, and over each real server's.
type statsGroup struct {
	model.ServicePortName
	kind model.AddressKind
	ipvs.Counters
	ipvs.Conns
	realServers map[netip.AddrPort]ipvs.Conns
}

func compareGroups(a, b *statsGroup) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if c := strings.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	return cmp.Compare(a.kind, b.kind)
}

type groupKey struct {
	model.ServicePortName
	kind model.AddressKind
}

// build sums snap by Service port and kind and makes the series, in the
// order of (namespace, service, port, kind), so that the cap keeps the
// same Services from one read to the next: every group's series first,
// then the real servers' with what the cap leaves. It returns how many
// series the cap left out.
func (s *ServiceStats) build(snap *ipvs.StatsSnapshot) ([]prometheus.Metric, int) {
	idx := make(map[groupKey]int, len(snap.Services)/2)
	groups := make([]statsGroup, 0, len(snap.Services)/2)
	for i := range snap.Services {
		st := &snap.Services[i]
		k := groupKey{st.Service, st.Kind}
		j, ok := idx[k]
		if !ok {
			j = len(groups)
			idx[k] = j
			groups = append(groups, statsGroup{ServicePortName: st.Service, kind: st.Kind})
		}
		g := &groups[j]
		g.Counters.Add(st.Counters)
		g.Conns.Add(st.Conns)
		if s.realServers && len(st.RealServers) > 0 {
			if g.realServers == nil {
				g.realServers = make(map[netip.AddrPort]ipvs.Conns, len(st.RealServers))
			}
			for _, rs := range st.RealServers {
				ap := netip.AddrPortFrom(rs.Address, rs.Port)
				c := g.realServers[ap]
				c.Add(rs.Conns)
				g.realServers[ap] = c
			}
		}
	}
	order := make([]*statsGroup, len(groups))
	for i := range groups {
		order[i] = &groups[i]
	}
	slices.SortFunc(order, compareGroups)

	budget := s.maxSeries
	fit := min(len(order), budget/seriesPerGroup)
	omitted := (len(order) - fit) * seriesPerGroup
	budget -= fit * seriesPerGroup
	out := make([]prometheus.Metric, 0, fit*seriesPerGroup)
	for _, g := range order[:fit] {
		l := []string{g.Namespace, g.Name, g.Port, g.kind.String()}
		in, outDir := append(slices.Clip(l), "in"), append(slices.Clip(l), "out")
		out = append(out,
			prometheus.MustNewConstMetric(descConnections, prometheus.CounterValue, float64(g.Connections), l...),
			prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(g.InPackets), in...),
			prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(g.OutPackets), outDir...),
			prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(g.InBytes), in...),
			prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(g.OutBytes), outDir...),
			prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(g.Active), l...),
			prometheus.MustNewConstMetric(descInactive, prometheus.GaugeValue, float64(g.Inactive), l...))
	}
	if !s.realServers {
		return out, omitted
	}
	for i, g := range order {
		for _, ap := range slices.SortedFunc(maps.Keys(g.realServers), netip.AddrPort.Compare) {
			if i >= fit || budget < 2 {
				omitted += 2
				continue
			}
			budget -= 2
			c := g.realServers[ap]
			l := []string{g.Namespace, g.Name, g.Port, g.kind.String(), ap.String()}
			out = append(out,
				prometheus.MustNewConstMetric(descRSActive, prometheus.GaugeValue, float64(c.Active), l...),
				prometheus.MustNewConstMetric(descRSInactive, prometheus.GaugeValue, float64(c.Inactive), l...))
		}
	}
	return out, omitted
}

// AddServiceStats registers s on m's registry.
func (m *Metrics) AddServiceStats(s *ServiceStats) { m.Registry.MustRegister(s) }
