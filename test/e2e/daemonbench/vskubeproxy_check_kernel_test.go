//go:build kernel

package daemonbench

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// envIntZero reads a non-negative integer, 0 when unset.
func envIntZero(t *testing.T, key string) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", key, v)
	}
	return n
}

// envProxies reads BENCHVS_PROXIES: which contenders run, by key
// (kube-proxy, ipvs-proxy), comma-separated; unset, both.
func envProxies(t *testing.T) map[string]bool {
	t.Helper()
	v := os.Getenv("BENCHVS_PROXIES")
	if v == "" {
		return map[string]bool{"kube-proxy": true, "ipvs-proxy": true}
	}
	out := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		switch k := strings.TrimSpace(f); k {
		case "kube-proxy", "ipvs-proxy":
			out[k] = true
		default:
			t.Fatalf("BENCHVS_PROXIES=%q: want kube-proxy, ipvs-proxy or both, comma-separated", v)
		}
	}
	return out
}

// envStats reads BENCHVS_SERVICE_STATS: the --service-stats values ours
// runs with, one run each, comma-separated; unset, one run with its
// default.
func envStats(t *testing.T) []string {
	t.Helper()
	v := os.Getenv("BENCHVS_SERVICE_STATS")
	if v == "" {
		return []string{""}
	}
	var out []string
	for _, f := range strings.Split(v, ",") {
		switch k := strings.TrimSpace(f); k {
		case "true", "false":
			out = append(out, k)
		default:
			t.Fatalf("BENCHVS_SERVICE_STATS=%q: want true, false or both, comma-separated", v)
		}
	}
	return out
}

// wanted is what either proxy must program for the API's ClusterIP TCP
// Services: per virtual server ("IP:PORT") the ready endpoints
// ("IP:PORT"); every ClusterIP on kube-ipvs0 and in KUBE-CLUSTER-IP.
type wanted struct {
	real      map[string]map[string]bool
	clusterIP map[string]netip.Addr // benchmark Service name -> ClusterIP
	sets      map[string]bool       // "IP,tcp:PORT"
}

// listWanted reads every Service and EndpointSlice of the API server.
func listWanted(t *testing.T, ctx context.Context, c kubernetes.Interface) *wanted {
	t.Helper()
	svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sls, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bySvc := map[string][]discoveryv1.EndpointSlice{}
	for _, s := range sls.Items {
		k := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
		bySvc[k] = append(bySvc[k], s)
	}
	w := &wanted{real: map[string]map[string]bool{}, clusterIP: map[string]netip.Addr{}, sets: map[string]bool{}}
	for _, s := range svcs.Items {
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		if err != nil || !ip.Is4() {
			continue
		}
		if s.Namespace == benchNS {
			w.clusterIP[s.Name] = ip
		}
		for _, sp := range s.Spec.Ports {
			if sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			vip := netip.AddrPortFrom(ip, uint16(sp.Port)).String()
			w.sets[fmt.Sprintf("%s,tcp:%d", ip, sp.Port)] = true
			rs := map[string]bool{}
			for _, sl := range bySvc[s.Namespace+"/"+s.Name] {
				for _, ep := range sl.Ports {
					if ep.Port == nil || ep.Name == nil || *ep.Name != sp.Name {
						continue
					}
					for _, e := range sl.Endpoints {
						if e.Conditions.Ready != nil && !*e.Conditions.Ready {
							continue
						}
						for _, a := range e.Addresses {
							rs[netip.AddrPortFrom(netip.MustParseAddr(a), uint16(*ep.Port)).String()] = true
						}
					}
				}
			}
			w.real[vip] = rs
		}
	}
	return w
}

// check compares the node's kernel with w: every wanted virtual server
// with exactly its ready endpoints as real servers of non-zero weight
// (`ipvsadm -S -n`), every ClusterIP on kube-ipvs0 and in the
// KUBE-CLUSTER-IP set, and the nat table's jumps to KUBE-SERVICES and
// its match on that set. It returns the counts it saw.
func (w *wanted) check(node *ktest.Node) (string, error) {
	save, err := node.Exec("ipvsadm", "-S", "-n")
	if err != nil {
		return "", err
	}
	got := map[string]map[string]bool{}
	nrs := 0
	for _, l := range strings.Split(save, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "-A" && f[1] == "-t":
			if got[f[2]] == nil {
				got[f[2]] = map[string]bool{}
			}
		case len(f) >= 5 && f[0] == "-a" && f[1] == "-t" && f[3] == "-r":
			if i := slices.Index(f, "-w"); i > 0 && i+1 < len(f) && f[i+1] == "0" {
				continue
			}
			if got[f[2]] == nil {
				got[f[2]] = map[string]bool{}
			}
			got[f[2]][f[4]] = true
			nrs++
		}
	}
	for vip, rs := range w.real {
		g, ok := got[vip]
		if !ok {
			return "", fmt.Errorf("virtual server %s missing (%d of %d present)", vip, len(got), len(w.real))
		}
		if len(g) != len(rs) {
			return "", fmt.Errorf("virtual server %s has %d real servers, want %d", vip, len(g), len(rs))
		}
		for a := range rs {
			if !g[a] {
				return "", fmt.Errorf("virtual server %s lacks real server %s", vip, a)
			}
		}
	}
	addrs, err := node.Exec("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	if err != nil {
		return "", err
	}
	bound := map[string]bool{}
	for _, l := range strings.Split(addrs, "\n") {
		if f := strings.Fields(l); len(f) >= 4 {
			a, _, _ := strings.Cut(f[3], "/")
			bound[a] = true
		}
	}
	for s := range w.sets {
		a, _, _ := strings.Cut(s, ",")
		if !bound[a] {
			return "", fmt.Errorf("%s not on kube-ipvs0 (%d addresses)", a, len(bound))
		}
	}
	set, err := node.IPSetSave("KUBE-CLUSTER-IP")
	if err != nil {
		return "", err
	}
	inSet := map[string]bool{}
	for _, l := range strings.Split(set, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "add" {
			inSet[f[2]] = true
		}
	}
	for s := range w.sets {
		if !inSet[s] {
			return "", fmt.Errorf("%s not in KUBE-CLUSTER-IP (%d entries)", s, len(inSet))
		}
	}
	nat, err := node.Exec("iptables-save", "-t", "nat")
	if err != nil {
		return "", err
	}
	for _, want := range [][2]string{{"-A PREROUTING ", "-j KUBE-SERVICES"}, {"-A OUTPUT ", "-j KUBE-SERVICES"},
		{"-A KUBE-SERVICES ", "--match-set KUBE-CLUSTER-IP dst,dst"}, {"-A POSTROUTING ", "-j KUBE-POSTROUTING"}} {
		if !hasRule(nat, want[0], want[1]) {
			return "", fmt.Errorf("nat table has no %q rule with %q", want[0], want[1])
		}
	}
	return fmt.Sprintf("%d virtual servers, %d real servers, %d kube-ipvs0 addresses, %d KUBE-CLUSTER-IP entries, nat chains",
		len(got), nrs, len(bound), len(inSet)), nil
}

func hasRule(save, prefix, part string) bool {
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, prefix) && strings.Contains(l, part) {
			return true
		}
	}
	return false
}

// ratio is a/b as "N.N×".
func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

// vsReport prints the figures of both contenders, kube-proxy first, and
// the line docs/benchmarks.md quotes.
func vsReport(services, endpoints, changes int, rs []vsResult) string {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	mib := func(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
	var b strings.Builder
	fmt.Fprintf(&b, "BENCHVS-REPORT-BEGIN\n%d Services × %d endpoints, %d EndpointSlice changes per proxy\n", services, endpoints, changes)
	b.WriteString("| Figure |")
	for _, r := range rs {
		fmt.Fprintf(&b, " %s |", r.name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(rs)) + "\n")
	row := func(name string, f func(r vsResult) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, r := range rs {
			fmt.Fprintf(&b, " %s |", f(r))
		}
		b.WriteString("\n")
	}
	row("first full sync complete (start → IPVS, addresses, ipsets, rules)", func(r vsResult) string {
		if r.overBudget {
			return "> " + sec(r.fullSync) + " (budget)"
		}
		return sec(r.fullSync)
	})
	q := func(d []time.Duration, p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return quantile(d, p)
	}
	row("one change, p50 / p99", func(r vsResult) string {
		if r.changeOverBudget {
			return "> " + sec(r.lat[0]) + " (one change written after the first-sync budget, not in the kernel within the change budget)"
		}
		if r.overBudget {
			return ms(q(r.lat, 0.5)) + " (one change written after the first-sync budget)"
		}
		if len(r.lat) < changes {
			return fmt.Sprintf("%s / %s (%d changes: BENCHVS_CHANGES_WALL)", ms(q(r.lat, 0.5)), ms(q(r.lat, 0.99)), len(r.lat))
		}
		return ms(q(r.lat, 0.5)) + " / " + ms(q(r.lat, 0.99))
	})
	row("latency floor (bare informer), p50 / p99", func(r vsResult) string { return ms(q(r.floor, 0.5)) + " / " + ms(q(r.floor, 0.99)) })
	row("one change ÷ floor, p50 / p99", func(r vsResult) string {
		return ratio(q(r.lat, 0.5).Seconds(), q(r.floor, 0.5).Seconds()) + " / " + ratio(q(r.lat, 0.99).Seconds(), q(r.floor, 0.99).Seconds())
	})
	row("peak RSS (VmHWM), after first sync / at end", func(r vsResult) string { return mib(r.hwmAfterFull) + " / " + mib(r.hwm) })
	row("CPU while idle (with waited children)", func(r vsResult) string { return sec(r.idleCPU) + " in " + sec(r.idle) })
	row("CPU over the changes (with waited children)", func(r vsResult) string { return sec(r.changeCPU) + " in " + sec(r.changeWall) })
	row("its own sync histogram: syncs and their time up to the first complete sync", func(r vsResult) string {
		return fmt.Sprintf("%d, %s", r.firstSyncs, sec(r.firstSyncSum))
	})
	row("its own sync histogram over the changes: syncs, mean", func(r vsResult) string {
		if r.changeSyncs == 0 {
			return "0"
		}
		return fmt.Sprintf("%d, %s", r.changeSyncs, ms(r.changeSyncSum/time.Duration(r.changeSyncs)))
	})
	row("kernel at first sync", func(r vsResult) string { return r.kernel })
	row("its start, from its log (since the exec)", func(r vsResult) string { return cmp.Or(r.startup, "—") })
	row("critical Services", func(r vsResult) string { return cmp.Or(r.critical, "—") })
	if len(rs) >= 2 && rs[0].kubeProxy {
		kp := rs[0]
		lower := ""
		if kp.overBudget {
			lower = " (kube-proxy over its budget: a lower bound)"
		}
		for _, ours := range rs[1:] {
			fmt.Fprintf(&b, "vs kube-proxy at %d services (%s): one change %s faster, full sync %s sooner, peak RSS %s smaller%s\n", services, ours.name,
				ratio(q(kp.lat, 0.5).Seconds(), q(ours.lat, 0.5).Seconds()), ratio(kp.fullSync.Seconds(), ours.fullSync.Seconds()),
				ratio(float64(kp.hwm), float64(ours.hwm)), lower)
		}
	} else {
		b.WriteString("(kube-proxy not run, BENCHVS_PROXIES: no side-by-side line)\n")
	}
	for _, r := range rs {
		b.WriteString(r.breakdown)
		b.WriteString(r.memory)
	}
	b.WriteString("BENCHVS-REPORT-END\n")
	return b.String()
}
