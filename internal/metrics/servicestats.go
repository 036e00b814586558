package metrics

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

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

// The per-Service families: names and help, for Describe's descriptors
// and writeText's headers alike.
const (
	nameConnections = namespace + "_service_connections_total"
	namePackets     = namespace + "_service_packets_total"
	nameBytes       = namespace + "_service_bytes_total"
	nameActive      = namespace + "_service_active_connections"
	nameInactive    = namespace + "_service_inactive_connections"
	nameRSActive    = namespace + "_real_server_active_connections"
	nameRSInactive  = namespace + "_real_server_inactive_connections"
)

var familyHelp = map[string]string{
	nameConnections: "Connections IPVS scheduled to a Service port's virtual servers of one address kind, summed over them (both families).",
	namePackets:     "Packets through a Service port's virtual servers of one address kind, by direction: in (to the real servers), out (their replies).",
	nameBytes:       "Bytes through a Service port's virtual servers of one address kind, by direction: in (to the real servers), out (their replies).",
	nameActive:      "Active connections (ipvsadm's ActiveConn) of a Service port's virtual servers of one address kind, summed over their real servers.",
	nameInactive:    "Inactive connection entries (ipvsadm's InActConn) of a Service port's virtual servers of one address kind, summed over their real servers.",
	nameRSActive:    "Active connections of one real server (ADDRESS:PORT) of a Service port's virtual servers of one kind (--service-stats-real-servers).",
	nameRSInactive:  "Inactive connection entries of one real server of a Service port's virtual servers of one kind (--service-stats-real-servers).",
}

var (
	serviceLabels    = []string{"namespace", "service", "port", "kind"}
	directionLabels  = append(slices.Clone(serviceLabels), "direction")
	realServerLabels = append(slices.Clone(serviceLabels), "real_server")

	descConnections = newStatsDesc(nameConnections, serviceLabels)
	descPackets     = newStatsDesc(namePackets, directionLabels)
	descBytes       = newStatsDesc(nameBytes, directionLabels)
	descActive      = newStatsDesc(nameActive, serviceLabels)
	descInactive    = newStatsDesc(nameInactive, serviceLabels)
	descRSActive    = newStatsDesc(nameRSActive, realServerLabels)
	descRSInactive  = newStatsDesc(nameRSInactive, realServerLabels)
	descAge         = prometheus.NewDesc(namespace+"_service_stats_age_seconds",
		"Age of the IPVS read the per-Service statistics come from (the periodic full sync's, every --sync-period).", nil, nil)
)

func newStatsDesc(name string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, familyHelp[name], labels, nil)
}

// ServiceStats serves the per-Service statistics of the last snapshot.
// Publish is called on the sync loop; Collect and writeText on the
// scrape's goroutine.
//
// Publish keeps only what the series need, summed by Service port and
// kind and already cut to the cap, and the scrape writes them into the
// exposition text itself (writeText) instead of as a metric and a
// message per series: both keep the per-Service statistics' memory to
// the cap's size, not the Service count's, whatever the scrape rate
// (BenchmarkServiceStatsScrape).
type ServiceStats struct {
	maxSeries   int
	realServers bool
	clock       clock.PassiveClock
	omitted     prometheus.Counter

	mu  sync.Mutex
	cur *statsView
	// pending is cur's series left out, added to omitted by the first
	// scrape that serves cur.
	pending int
}

// statsView is one snapshot's series: its groups that fit the cap, in
// (namespace, service, port, kind) order, each with the real servers
// that fit. It is never changed once published.
type statsView struct {
	read   time.Time
	groups []statsGroup
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

// Publish replaces the series with snap's; snap is not kept.
func (s *ServiceStats) Publish(snap *ipvs.StatsSnapshot) {
	v, omitted := s.build(snap)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur, s.pending = v, omitted
}

// Describe implements prometheus.Collector. It describes the series
// writeText serves too, so that no other collector can take their names.
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

// Collect implements prometheus.Collector: the snapshot's age and the
// series left out. The per-Service series are writeText's.
func (s *ServiceStats) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	v := s.cur
	s.omitted.Add(float64(s.pending))
	s.pending = 0
	s.mu.Unlock()
	if v != nil {
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, s.clock.Since(v.read).Seconds())
	}
	s.omitted.Collect(ch)
}

// view is the series a scrape serves.
func (s *ServiceStats) view() *statsView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// statsGroup is one Service port and kind: the sum over its virtual
// servers, and each real server's over them.
type statsGroup struct {
	model.ServicePortName
	kind model.AddressKind
	ipvs.Counters
	ipvs.Conns
	realServers []ipvs.RealServerConns
}

func compareServiceStats(a, b *ipvs.ServiceStats) int {
	if c := strings.Compare(a.Service.Namespace, b.Service.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(a.Service.Name, b.Service.Name); c != 0 {
		return c
	}
	if c := strings.Compare(a.Service.Port, b.Service.Port); c != 0 {
		return c
	}
	return cmp.Compare(a.Kind, b.Kind)
}

func compareRealServers(a, b ipvs.RealServerConns) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// build sums snap by Service port and kind, in the order of (namespace,
// service, port, kind), so that the cap keeps the same Services from one
// read to the next: every group's series first, then the real servers'
// with what the cap leaves. It returns how many series the cap left out.
// Only the groups that fit are kept; snap is read, not changed.
func (s *ServiceStats) build(snap *ipvs.StatsSnapshot) (*statsView, int) {
	svcs := snap.Services
	order := make([]int32, len(svcs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return compareServiceStats(&svcs[a], &svcs[b]) })

	fit := s.maxSeries / seriesPerGroup
	v := &statsView{read: snap.Read}
	var omitted int
	var rs []ipvs.RealServerConns
	for i := 0; i < len(order); {
		first := &svcs[order[i]]
		g := statsGroup{ServicePortName: first.Service, kind: first.Kind}
		rs = rs[:0]
		for ; i < len(order) && compareServiceStats(first, &svcs[order[i]]) == 0; i++ {
			st := &svcs[order[i]]
			g.Counters.Add(st.Counters)
			g.Conns.Add(st.Conns)
			if s.realServers {
				rs = append(rs, st.RealServers...)
			}
		}
		rs = sumRealServers(rs)
		if len(v.groups) >= fit {
			omitted += seriesPerGroup + 2*len(rs)
			continue
		}
		if len(rs) > 0 {
			g.realServers = slices.Clone(rs)
		}
		v.groups = append(v.groups, g)
	}
	budget := s.maxSeries - len(v.groups)*seriesPerGroup
	for i := range v.groups {
		g := &v.groups[i]
		keep := min(len(g.realServers), max(budget, 0)/2)
		omitted += 2 * (len(g.realServers) - keep)
		budget -= 2 * keep
		g.realServers = g.realServers[:keep:keep]
	}
	v.groups = slices.Clip(v.groups)
	return v, omitted
}

// sumRealServers sorts rs by address and sums the entries of one
// address (a real server behind both families' or several node
// addresses' virtual servers of a group), in place.
func sumRealServers(rs []ipvs.RealServerConns) []ipvs.RealServerConns {
	slices.SortFunc(rs, compareRealServers)
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && compareRealServers(out[n-1], r) == 0 {
			out[n-1].Conns.Add(r.Conns)
			continue
		}
		out = append(out, r)
	}
	return out
}

// AddServiceStats registers s on m's registry and has m's Handler write
// its per-Service series; call it before Handler.
func (m *Metrics) AddServiceStats(s *ServiceStats) {
	m.Registry.MustRegister(s)
	m.serviceStats = s
}
