package config

import "github.com/spf13/pflag"

// ServiceStats are the flags of the per-Service IPVS statistics
// (internal/metrics.ServiceStats).
type ServiceStats struct {
	// Enabled is --service-stats.
	Enabled bool
	// RealServers is --service-stats-real-servers.
	RealServers bool
	// MaxSeries is --service-stats-max-series.
	MaxSeries int
}

// ServiceStatsSettings are the serviceStats: section of
// ProxyConfiguration.
type ServiceStatsSettings struct {
	Enabled     *bool `json:"enabled,omitempty"`
	RealServers *bool `json:"realServers,omitempty"`
	MaxSeries   *int  `json:"maxSeries,omitempty"`
}

// file is s as the serviceStats: section --write-config-to writes.
func (s *ServiceStats) file() *ServiceStatsSettings {
	return &ServiceStatsSettings{Enabled: &s.Enabled, RealServers: &s.RealServers, MaxSeries: &s.MaxSeries}
}

// apply sets what the file's serviceStats: section gives, unless the
// flag was on the command line.
func (s *ServiceStats) apply(v *ServiceStatsSettings, st setter) {
	if v == nil {
		return
	}
	set(st, "service-stats", &s.Enabled, v.Enabled)
	set(st, "service-stats-real-servers", &s.RealServers, v.RealServers)
	set(st, "service-stats-max-series", &s.MaxSeries, v.MaxSeries)
}

func (s *ServiceStats) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&s.Enabled, "service-stats", s.Enabled, "Export each Service port's IPVS counters (connections, packets, bytes, active and inactive connections) by address kind on /metrics, from the periodic full sync's read of the IPVS table (every --ipvs-sync-period); a scrape never reads the kernel.")
	fs.BoolVar(&s.RealServers, "service-stats-real-servers", s.RealServers, "With --service-stats, also export each real server's active and inactive connections (two series per endpoint and address kind).")
	fs.IntVar(&s.MaxSeries, "service-stats-max-series", s.MaxSeries, "Most per-Service statistics series a scrape returns (seven per Service port and address kind, two per real server); the rest are left out in the order namespace, service, port, kind and counted in ipvs_proxy_service_stats_series_omitted_total.")
}
