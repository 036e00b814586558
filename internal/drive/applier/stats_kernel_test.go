//go:build kernel

package applier

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// statsCluster is two TCP Services with a ClusterIP and a NodePort each,
// on pod-a and pod-b: "busy" gets the test's traffic, "quiet" none.
func statsCluster() model.Cluster {
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}, Nodes: testCluster().Nodes}
	for i, name := range []string{"busy", "quiet"} {
		sp := port(name, "http", model.TCP, 80)
		sp.ClusterIPs = []netip.Addr{addr(fmt.Sprintf("10.96.0.9%d", i))}
		sp.NodePort = uint16(30090 + i)
		c.Services = append(c.Services, sp)
		c.Endpoints[sp.Name] = eps(thisNode, ktest.BackendPort, v4.podA, v4.podB)
	}
	return c
}

// statsSeries are the series of m's /metrics as
// "NAME{kind,service[,direction][,real_server]}" (the labels the test
// tells apart, those a series has) → value.
func statsSeries(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(pmodel.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			byName := map[string]string{}
			for _, l := range m.GetLabel() {
				byName[l.GetName()] = l.GetValue()
			}
			var ls []string
			for _, n := range []string{"kind", "service", "direction", "real_server"} {
				if v, ok := byName[n]; ok {
					ls = append(ls, v)
				}
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// TestKernelServiceStats sends real traffic through busy's ClusterIP (from
// a pod) and its NodePort (from a LAN client), then runs a periodic full
// sync's read beside the loop and its full sync, as the daemon does: the
// per-Service series come from that one read and show busy's connections,
// packets and bytes under the right kind, quiet's at zero; a collector
// capped at one Service port and kind serves the first in order and
// counts the rest as left out.
func TestKernelServiceStats(t *testing.T) {
	b := newKBed(t)
	stats := metrics.NewServiceStats(metrics.DefaultServiceStatsMaxSeries, true, nil)
	capped := metrics.NewServiceStats(7, false, nil)
	p := b.open(ipvs.Options{Stats: ipvs.StatsOptions{RealServers: true, Publish: func(s *ipvs.StatsSnapshot) {
		stats.Publish(s)
		capped.Publish(s)
	}}})
	st := b.plan(statsCluster())
	b.full(p, st)

	const viaCluster, viaNodePort = 6, 4
	clusterIP := ap(addr("10.96.0.90"), 80)
	nodePort := ap(ktest.NodeIPv4, 30090)
	if hits := b.podC.Hits(t, ktest.TCP, clusterIP, viaCluster); hits["pod-a"]+hits["pod-b"] != viaCluster {
		t.Fatalf("busy's ClusterIP %s answered %v", clusterIP, hits)
	}
	if hits := b.cliA.Hits(t, ktest.TCP, nodePort, viaNodePort); hits["pod-a"]+hits["pod-b"] != viaNodePort {
		t.Fatalf("busy's NodePort %s answered %v", nodePort, hits)
	}

	// The periodic full sync: its read beside the loop, then the sync.
	// The kernel folds its per-CPU counters into the ones it reports
	// every 2 s (its rate estimator's tick), so the traffic shows within
	// a few periodic reads.
	reg := metrics.New()
	reg.AddServiceStats(stats)
	var got map[string]float64
	for deadline := time.Now().Add(20 * time.Second); ; {
		read := p.app.BeginFull()
		var rb *Readback
		if err := b.node.Do(func() (err error) { rb, err = read(); return err }); err != nil {
			t.Fatal(err)
		}
		b.sync("full sync from the read", func() (*Result, error) { return p.app.FullFrom(st, b.nodeAddrs, rb, nil) })
		got = statsSeries(t, reg)
		if got["ipvs_proxy_service_connections_total{cluster,busy}"] >= viaCluster &&
			got["ipvs_proxy_service_connections_total{node_port,busy}"] >= viaNodePort || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("series: %v", got)
	want := map[string]float64{
		"ipvs_proxy_service_connections_total{cluster,busy}":    viaCluster,
		"ipvs_proxy_service_connections_total{node_port,busy}":  viaNodePort,
		"ipvs_proxy_service_connections_total{cluster,quiet}":   0,
		"ipvs_proxy_service_connections_total{node_port,quiet}": 0,
		"ipvs_proxy_service_packets_total{cluster,quiet,in}":    0,
		"ipvs_proxy_service_bytes_total{node_port,quiet,out}":   0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	// Each request is a few segments each way with a payload: at least
	// one packet and a TCP/IP header's worth of bytes per connection.
	for _, kind := range []string{"cluster", "node_port"} {
		n := float64(viaCluster)
		if kind == "node_port" {
			n = viaNodePort
		}
		for _, dir := range []string{"in", "out"} {
			if g := got["ipvs_proxy_service_packets_total{"+kind+",busy,"+dir+"}"]; g < n {
				t.Errorf("busy %s packets %s = %v, want at least %v", kind, dir, g, n)
			}
			if g := got["ipvs_proxy_service_bytes_total{"+kind+",busy,"+dir+"}"]; g < 40*n {
				t.Errorf("busy %s bytes %s = %v, want at least %v", kind, dir, g, 40*n)
			}
		}
		// Closed connections wait in TIME_WAIT: inactive entries.
		if a, i := got["ipvs_proxy_service_active_connections{"+kind+",busy}"], got["ipvs_proxy_service_inactive_connections{"+kind+",busy}"]; a+i < 1 {
			t.Errorf("busy %s: %v active, %v inactive connections, want some", kind, a, i)
		}
		var perRS float64
		for k, v := range got {
			if strings.HasPrefix(k, "ipvs_proxy_real_server_") && strings.Contains(k, "{"+kind+",busy,") {
				perRS += v
			}
		}
		if want := got["ipvs_proxy_service_active_connections{"+kind+",busy}"] + got["ipvs_proxy_service_inactive_connections{"+kind+",busy}"]; perRS != want {
			t.Errorf("busy %s: real servers' connections sum to %v, the Service's to %v", kind, perRS, want)
		}
	}
	if age, ok := got["ipvs_proxy_service_stats_age_seconds{}"]; !ok || age < 0 || age > 60 {
		t.Errorf("age %v (present %v)", age, ok)
	}

	creg := metrics.New()
	creg.AddServiceStats(capped)
	cgot := statsSeries(t, creg)
	var kept []string
	for k := range cgot {
		if strings.HasPrefix(k, "ipvs_proxy_service_connections_total") {
			kept = append(kept, k)
		}
	}
	if !slices.Equal(kept, []string{"ipvs_proxy_service_connections_total{cluster,busy}"}) {
		t.Errorf("capped at 7 series: kept %v, want busy's cluster IP alone", kept)
	}
	if g := cgot["ipvs_proxy_service_stats_series_omitted_total{}"]; g != 3*7 {
		t.Errorf("left out %v series, want 21 (three Service ports and kinds)", g)
	}
}
