package daemon

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
)

// reportServiceStats registers the per-Service statistics on m and has
// the IPVS reconciler keep the counters its full syncs read for them
// (--service-stats): no read of its own, the periodic full sync's.
func (k *kernel) reportServiceStats(c config.ServiceStats, m *metrics.Metrics) {
	if !c.Enabled {
		return
	}
	s := metrics.NewServiceStats(c.MaxSeries, c.RealServers, nil)
	m.AddServiceStats(s)
	k.rec.SetStats(s.Options())
}
