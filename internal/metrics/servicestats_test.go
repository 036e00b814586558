package metrics

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

func spn(ns, name, port string) model.ServicePortName {
	return model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port}
}

// scrapeStats is /metrics' text with s registered.
func scrapeStats(t *testing.T, s *ServiceStats) string {
	t.Helper()
	m := New()
	m.AddServiceStats(s)
	return scrape(t, m)
}

// A Service port's virtual servers of one kind are summed (both
// families, every node address of a NodePort), each kind on its own; the
// series are labelled from the snapshot's typed identities.
func TestServiceStatsSums(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	web, dns := spn("shop", "web", "http"), spn("kube-system", "kube-dns", "dns")
	rs := func(a string, active, inactive uint64) ipvs.RealServerConns {
		return ipvs.RealServerConns{Address: netip.MustParseAddr(a), Port: 8080, Conns: ipvs.Conns{Active: active, Inactive: inactive}}
	}
	s := NewServiceStats(DefaultServiceStatsMaxSeries, true, clk)
	s.Publish(&ipvs.StatsSnapshot{Read: time.Unix(990, 0), Services: []ipvs.ServiceStats{
		{Service: web, Kind: model.KindClusterIP, Counters: ipvs.Counters{Connections: 2, InPackets: 10, OutPackets: 8, InBytes: 1000, OutBytes: 800},
			Conns: ipvs.Conns{Active: 1, Inactive: 1}, RealServers: []ipvs.RealServerConns{rs("10.244.0.5", 1, 1)}},
		// The IPv6 cluster IP of the same port.
		{Service: web, Kind: model.KindClusterIP, Counters: ipvs.Counters{Connections: 1, InPackets: 5, OutPackets: 4, InBytes: 500, OutBytes: 400},
			Conns: ipvs.Conns{Active: 2}, RealServers: []ipvs.RealServerConns{rs("10.244.0.5", 2, 0)}},
		// Two node addresses' NodePort servers.
		{Service: web, Kind: model.KindNodePort, Counters: ipvs.Counters{Connections: 4}},
		{Service: web, Kind: model.KindNodePort, Counters: ipvs.Counters{Connections: 3}},
		{Service: dns, Kind: model.KindClusterIP, Counters: ipvs.Counters{Connections: 9}},
	}})
	body := scrapeStats(t, s)
	for _, want := range []string{
		`ipvs_proxy_service_connections_total{kind="cluster",namespace="shop",port="http",service="web"} 3`,
		`ipvs_proxy_service_connections_total{kind="node_port",namespace="shop",port="http",service="web"} 7`,
		`ipvs_proxy_service_connections_total{kind="cluster",namespace="kube-system",port="dns",service="kube-dns"} 9`,
		`ipvs_proxy_service_packets_total{direction="in",kind="cluster",namespace="shop",port="http",service="web"} 15`,
		`ipvs_proxy_service_packets_total{direction="out",kind="cluster",namespace="shop",port="http",service="web"} 12`,
		`ipvs_proxy_service_bytes_total{direction="in",kind="cluster",namespace="shop",port="http",service="web"} 1500`,
		`ipvs_proxy_service_bytes_total{direction="out",kind="cluster",namespace="shop",port="http",service="web"} 1200`,
		`ipvs_proxy_service_active_connections{kind="cluster",namespace="shop",port="http",service="web"} 3`,
		`ipvs_proxy_service_inactive_connections{kind="cluster",namespace="shop",port="http",service="web"} 1`,
		`ipvs_proxy_real_server_active_connections{kind="cluster",namespace="shop",port="http",real_server="10.244.0.5:8080",service="web"} 3`,
		`ipvs_proxy_service_stats_age_seconds 10`,
		`ipvs_proxy_service_stats_series_omitted_total 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	lintExposition(t, body)
}

// lintExposition parses body as the text format strictly (each family
// once, in one block; valid names and values) and lints it as
// Prometheus' promtool does.
func lintExposition(t *testing.T, body string) {
	t.Helper()
	p := expfmt.NewTextParser(pmodel.LegacyValidation)
	if _, err := p.TextToMetricFamilies(strings.NewReader(body)); err != nil {
		t.Errorf("/metrics does not parse: %v", err)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Errorf("lint: %v", err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "ipvs_proxy_service_") || strings.HasPrefix(p.Metric, "ipvs_proxy_real_server_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// A scraper that accepts gzip gets the same series compressed; one that
// asks for the protobuf format gets the text format.
func TestServiceStatsEncodings(t *testing.T) {
	s := NewServiceStats(DefaultServiceStatsMaxSeries, false, nil)
	s.Publish(&ipvs.StatsSnapshot{Read: time.Now(), Services: []ipvs.ServiceStats{
		{Service: spn("shop", "web", "http"), Kind: model.KindClusterIP, Counters: ipvs.Counters{Connections: 5}}}})
	m := New()
	m.AddServiceStats(s)
	const want = `ipvs_proxy_service_connections_total{kind="cluster",namespace="shop",port="http",service="web"} 5` + "\n"

	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept-Encoding", "br;q=1.0, gzip;q=0.8")
	req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, req)
	if ce, ct := rec.Header().Get("Content-Encoding"), rec.Header().Get("Content-Type"); ce != "gzip" || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Encoding %q, Content-Type %q; want gzip, the text format", ce, ct)
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), want) {
		t.Errorf("gzip-compressed /metrics lacks %s", want)
	}
	lintExposition(t, string(body))
}

// The cap keeps whole Service ports and kinds in (namespace, service,
// port, kind) order, then real servers with what is left, and counts
// what it left out once per snapshot, however often it is scraped.
func TestServiceStatsCap(t *testing.T) {
	var snap ipvs.StatsSnapshot
	for i := range 5 {
		snap.Services = append(snap.Services, ipvs.ServiceStats{Service: spn("ns", fmt.Sprintf("svc-%d", 4-i), ""), Kind: model.KindClusterIP,
			RealServers: []ipvs.RealServerConns{{Address: netip.MustParseAddr("10.244.0.1"), Port: 80}}})
	}
	// Two groups and one real server: 2×7 + 2.
	s := NewServiceStats(2*seriesPerGroup+3, true, nil)
	s.Publish(&snap)
	var body string
	for range 3 {
		body = scrapeStats(t, s)
	}
	for _, want := range []string{`service="svc-0"`, `service="svc-1"`} {
		if !strings.Contains(body, `ipvs_proxy_service_connections_total{kind="cluster",namespace="ns",port="",`+want+`} 0`) {
			t.Errorf("/metrics lacks %s's connections", want)
		}
	}
	if strings.Contains(body, `service="svc-2"`) {
		t.Errorf("svc-2 is past the cap:\n%s", body)
	}
	if n := strings.Count(body, "ipvs_proxy_real_server_active_connections{"); n != 1 {
		t.Errorf("%d real servers' series, want 1 (svc-0's)", n)
	}
	// Left out: 3 groups × 7, and 2 real servers of the kept groups × 2
	// plus 3 of the others × 2.
	if got, want := testutil.ToFloat64(s.omitted), float64(3*seriesPerGroup+2+3*2); got != want {
		t.Errorf("omitted %v, want %v", got, want)
	}
	s.Publish(&snap)
	scrapeStats(t, s)
	if got, want := testutil.ToFloat64(s.omitted), float64(2*(3*seriesPerGroup+8)); got != want {
		t.Errorf("after a second snapshot omitted %v, want %v", got, want)
	}
}

// Before the first read no series but the omitted counter; no snapshot,
// no age.
func TestServiceStatsBeforeRead(t *testing.T) {
	s := NewServiceStats(DefaultServiceStatsMaxSeries, false, nil)
	if n := testutil.CollectAndCount(s); n != 1 {
		t.Errorf("%d series before any read, want the omitted counter alone", n)
	}
}

// BenchmarkServiceStatsScrape is one scrape's cost at 20,000 Services
// (each a port with a cluster IP in both families and a NodePort on two
// node addresses: 80,000 virtual servers, 40,000 Service ports and
// kinds), /metrics written to nowhere: "publish" is a full sync's
// Publish and one scrape, "scrape" a scrape of what was published.
func BenchmarkServiceStatsScrape(b *testing.B) {
	const services = 20000
	snap := &ipvs.StatsSnapshot{Read: time.Now()}
	for i := range services {
		name := spn(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("svc-%d", i), "http")
		for _, k := range []model.AddressKind{model.KindClusterIP, model.KindClusterIP, model.KindNodePort, model.KindNodePort} {
			snap.Services = append(snap.Services, ipvs.ServiceStats{Service: name, Kind: k,
				Counters: ipvs.Counters{Connections: uint64(i), InPackets: 10, OutPackets: 10, InBytes: 1000, OutBytes: 1000}, Conns: ipvs.Conns{Active: 1}})
		}
	}
	for _, c := range []struct {
		name string
		max  int
	}{{"default-cap", DefaultServiceStatsMaxSeries}, {"uncapped", 1 << 30}} {
		b.Run(c.name+"/publish", func(b *testing.B) {
			s := NewServiceStats(c.max, false, nil)
			m := New()
			m.AddServiceStats(s)
			h := m.Handler()
			b.ReportAllocs()
			for b.Loop() {
				s.Publish(snap)
				serve(h)
			}
		})
		b.Run(c.name+"/scrape", func(b *testing.B) {
			s := NewServiceStats(c.max, false, nil)
			m := New()
			m.AddServiceStats(s)
			h := m.Handler()
			s.Publish(snap)
			b.ReportAllocs()
			for b.Loop() {
				serve(h)
			}
		})
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

func serve(h http.Handler) {
	h.ServeHTTP(&discard{h: http.Header{}}, httptest.NewRequest("GET", "/metrics", nil))
}
