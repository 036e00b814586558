//go:build kernel

package prometheus_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// promAPI reads Prometheus' HTTP API (/api/v1) from inside the node
// namespace, where Prometheus listens on loopback.
type promAPI struct{ node *ktest.Node }

// get fetches /api/v1/PATH and decodes its data into out.
func (p *promAPI) get(path string, out any) error {
	code, body, err := p.node.HTTPGet(promAddr, "/api/v1/"+path, 20*time.Second)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return fmt.Errorf("HTTP %d, %w: %.200s", code, err, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("HTTP %d, status %s: %s", code, r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, out)
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) float() float64 {
	str, _ := s.Value[1].(string)
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// query evaluates expr now (GET /api/v1/query).
func (p *promAPI) query(expr string) ([]sample, error) {
	var d struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	if err := p.get("query?query="+url.QueryEscape(expr), &d); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", expr, d.ResultType)
	}
	return d.Result, nil
}

// reported is query, its samples logged under panel (after prefix) for
// the run's report.
func (p *promAPI) reported(t *testing.T, prefix, panel, expr string) ([]sample, error) {
	t.Helper()
	res, err := p.query(expr)
	if err != nil {
		return nil, err
	}
	var vals []string
	for _, s := range res {
		vals = append(vals, strconv.FormatFloat(s.float(), 'g', 4, 64))
	}
	t.Logf("PROM-REPORT %s%-42s %d sample(s) %v", prefix, panel+":", len(res), vals)
	return res, nil
}

func checkTargets(t *testing.T, p *promAPI) {
	t.Helper()
	var d struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := p.get("targets?state=active", &d); err != nil {
		t.Fatal(err)
	}
	if len(d.ActiveTargets) != 1 {
		t.Fatalf("%d active targets, want the proxy's one", len(d.ActiveTargets))
	}
	tg := d.ActiveTargets[0]
	if tg.Labels["job"] != "kube-proxy" || tg.Health != "up" {
		t.Fatalf("target %v health %s (%s), want job kube-proxy up", tg.Labels, tg.Health, tg.LastError)
	}
}

// checkDashboard evaluates every query of the dashboard file: those
// marked nonempty must return samples, histogram quantiles finite ones.
func checkDashboard(t *testing.T, p *promAPI, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Queries []struct{ Panel, Expr, Want string }
	}
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(d.Queries) == 0 {
		t.Fatalf("%s: no queries", file)
	}
	for _, q := range d.Queries {
		res, err := p.reported(t, "", q.Panel, q.Expr)
		if err != nil {
			t.Error(err)
			continue
		}
		switch q.Want {
		case "any":
		case "series":
			if len(res) == 0 {
				t.Errorf("panel %q: %s is empty", q.Panel, q.Expr)
			}
		case "nonempty":
			if len(res) == 0 {
				t.Errorf("panel %q: %s is empty", q.Panel, q.Expr)
			}
			if strings.HasPrefix(q.Expr, "histogram_quantile") {
				for _, s := range res {
					if f := s.float(); math.IsNaN(f) || math.IsInf(f, 0) {
						t.Errorf("panel %q: %s = %v for %v: no observation in the window", q.Panel, q.Expr, f, s.Metric)
					}
				}
			}
		default:
			t.Errorf("%s: panel %q: want %q is not nonempty, series or any", file, q.Panel, q.Want)
		}
	}
	// The control: a kube-proxy series that its IPVS mode does not register
	// (the iptables and nftables modes' full-sync histogram), and so
	// neither does this proxy, is empty through the same path, so
	// "nonempty" above is not true of any query.
	const absent = `kubeproxy_sync_full_proxy_rules_duration_seconds_count{job="kube-proxy"}`
	if res, err := p.query(absent); err != nil || len(res) != 0 {
		t.Errorf("control %s: %v %v, want empty", absent, res, err)
	}
	// The GET latency panel is "series": its quantile is NaN unless a GET
	// ended within the window, and the proxy's only GETs are its
	// informers' lists (at start and when a watch expires). Its histogram
	// must hold those.
	const gets = `sum(rest_client_request_duration_seconds_count{job="kube-proxy", verb="GET"}) > 0`
	if res, err := p.query(gets); err != nil || len(res) != 1 {
		t.Errorf("%s: %v %v, want the informers' lists", gets, res, err)
	} else {
		t.Logf("PROM-REPORT GET requests since start: %v", res[0].float())
	}
}

// checkRules reads every loaded rule's last evaluation (GET /api/v1/rules):
// kubernetes-mixin's kube-proxy alerts are inactive and their expressions
// empty; the component's rules evaluate without error, and the protected
// address alert fires for the refused Services.
func checkRules(t *testing.T, p *promAPI) {
	t.Helper()
	var d struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Query     string `json:"query"`
				Health    string `json:"health"`
				State     string `json:"state"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("rules", &d); err != nil {
		t.Fatal(err)
	}
	if res, err := p.query("ipvs_proxy_refusals"); err == nil {
		for _, r := range res {
			t.Logf("PROM-REPORT ipvs_proxy_refusals%v = %v", r.Metric, r.float())
		}
	}
	want := map[string]map[string]string{
		"kubernetes-system-kube-proxy": {"KubeProxyDown": "inactive", "KubeProxyInstanceUnreachable": "inactive"},
		"ipvs-proxy": {"IPVSProxySyncStale": "inactive", "IPVSProxyApplyErrors": "inactive",
			"IPVSProxyProtectedAddressRefused": "firing", "IPVSProxyKernelDrift": "inactive"},
	}
	seen := map[string]bool{}
	for _, g := range d.Groups {
		seen[g.Name] = true
		for _, r := range g.Rules {
			t.Logf("PROM-REPORT rule %s/%s: health %s, state %s", g.Name, r.Name, r.Health, r.State)
			if r.Health != "ok" {
				t.Errorf("rule %s/%s: health %s %s", g.Name, r.Name, r.Health, r.LastError)
			}
			if w, ok := want[g.Name][r.Name]; ok && r.State != w {
				t.Errorf("alert %s/%s is %s, want %s", g.Name, r.Name, r.State, w)
			}
			if g.Name == "kubernetes-system-kube-proxy" {
				if res, err := p.query(r.Query); err != nil || len(res) != 0 {
					t.Errorf("alert %s: %s = %v %v, want empty", r.Name, r.Query, res, err)
				}
			}
		}
	}
	for g := range want {
		if !seen[g] {
			t.Errorf("rule group %s not loaded", g)
		}
	}
}
