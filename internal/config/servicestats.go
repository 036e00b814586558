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

func (s *ServiceStats) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&s.Enabled, "service-stats", s.Enabled, "Export each Service port's IPVS counters (connections, packets, bytes, active and inactive connections) by address kind on /metrics, from the periodic full sync's read of the IPVS table (every --ipvs-sync-period); a scrape never reads the kernel.")
	fs.BoolVar(&s.RealServers, "service-stats-real-servers", s.RealServers, "With --service-stats, also export each real server's active and inactive connections (two series per endpoint and address kind).")
	fs.IntVar(&s.MaxSeries, "service-stats-max-series", s.MaxSeries, "Most per-Service statistics series a scrape returns (seven per Service port and address kind, two per real server); the rest are left out in the order namespace, service, port, kind and counted in ipvs_proxy_service_stats_series_omitted_total.")
}
