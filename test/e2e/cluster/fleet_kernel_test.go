//go:build kernel

package cluster_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// fleet is the bed in the middle of a node-by-node migration: node-a
// handed back to kube-proxy v1.34 (IPVS mode), node-b and node-c on
// ipvs-proxy.
type fleet struct {
	*bed
	// kpNode runs kube-proxy (kp) since handBack; its ipvs-proxy is stopped.
	kpNode *bedNode
	kp     *kubeproxy.Process
}

// TestFleetGuest runs in the VM under TestFleetVM: the bed with ipvs-proxy
// on every node, then node-a handed back to kube-proxy as docs/migration.md's
// "One node, during the migration" rollback does.
func TestFleetGuest(t *testing.T) {
	f := &fleet{bed: newBed(t)}
	t.Log(f.bed)
	d := f.newDisaster(t)
	t.Run("externalIP is node-b's address, ipvs-proxy on every node: node-b stays reachable from every node and pod", d.guarded)
	f.handBack(t, "node-a")
	t.Run("mixed fleet: kube-proxy on node-a, ipvs-proxy on node-b and node-c, cross-node traffic both ways", f.mixed)
	t.Run("externalIP is node-b's address, kube-proxy on node-a: node-a loses node-b until recover --apply", d.underKubeProxy)
}

// handBack is the rollback of one node: its ipvs-proxy gets SIGTERM (the
// DaemonSet pod deleted; the kernel state stays), then kube-proxy starts
// with kubeadm's config.conf and the DaemonSet's command and adopts that
// state; handBack returns once kube-proxy has synced.
func (f *fleet) handBack(t *testing.T, node string) {
	t.Helper()
	n := f.node(t, node)
	start := time.Now()
	took, err := n.proxy.Stop(30 * time.Second)
	if err != nil {
		t.Fatalf("%s: ipvs-proxy after SIGTERM: %v", node, err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.conf")
	if err := (kubeproxy.Config{Kubeconfig: vmtest.GuestEnv(t, "CLUSTER_KUBECONFIG_KUBE_PROXY"),
		ClusterCIDR: clusterCIDR.String()}).WriteFile(cfg); err != nil {
		t.Fatal(err)
	}
	f.kpNode = n
	f.kp = kubeproxy.Start(t, n.ns.NS, kubeproxy.Options{Bin: vmtest.GuestEnv(t, "KUBE_PROXY_BIN"), NodeName: n.name,
		ConfigFile: cfg, LogFile: filepath.Join(dir, "kube-proxy.log"), Verbosity: 2})
	t.Cleanup(func() { _, _ = f.kp.Stop(30 * time.Second) })
	synced, err := f.kp.WaitSync(1, time.Time{}, 5*time.Minute)
	if err != nil {
		t.Fatalf("%s: kube-proxy after ipvs-proxy: %v", node, err)
	}
	t.Logf("%s handed back: ipvs-proxy exited %v after SIGTERM, kube-proxy %s's first sync ended %v after it",
		node, took.Round(time.Millisecond), kubeproxy.Version, synced.Sub(start).Round(time.Millisecond))
}

// crossCheck is one request of the mixed fleet: from a pod or a node's
// host, to a ClusterIP or NodePort, answered by exactly one endpoint.
type crossCheck struct {
	what string
	from *ktest.NS
	to   netip.AddrPort
	want string
}

// mixed serves two Services from both kinds of node: web-a's endpoint on
// node-a (kube-proxy), web-b's on node-b (ipvs-proxy), each NodePort; a
// client pod on node-a and node-b. Every path that crosses from one kind
// of proxy to the other must answer from the right endpoint, pod sources
// must reach the endpoint unchanged, kube-proxy must sync cleanly and the
// ipvs-proxy nodes must report no apply error.
func (f *fleet) mixed(t *testing.T) {
	ns := f.testNamespace(t, "fleet")
	a, b, c := f.node(t, "node-a"), f.node(t, "node-b"), f.node(t, "node-c")
	created := time.Now()
	svc := map[string]*corev1.Service{}
	for _, n := range []*bedNode{a, b} {
		name := "web-" + strings.TrimPrefix(n.name, "node-")
		f.runPod(t, ns, podSpec{name: name, node: n.name, labels: map[string]string{"app": name},
			netexec: []string{"--http-port=8080"}, readyPort: 8080})
		svc[name] = f.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080), Protocol: corev1.ProtocolTCP}}}})
	}
	clientA := f.runPod(t, ns, podSpec{name: "client-a", node: a.name})
	clientB := f.runPod(t, ns, podSpec{name: "client-b", node: b.name})
	// kube-proxy's syncs take seconds in the emulated VM: wait for two that
	// ended after everything above existed (the second started after the
	// first ended, so it saw it all), then every path must answer at once.
	f.kpSyncedAfter(t, created)

	np := func(n *bedNode, s string) netip.AddrPort { return nodePort(n, svc[s].Spec.Ports[0].NodePort) }
	checks := []crossCheck{
		{"pod on node-a (kube-proxy) to a ClusterIP, endpoint on node-b (ipvs-proxy)", clientA.ns, vip(svc["web-b"], 80), "web-b"},
		{"node-a's host (kube-proxy) to a ClusterIP, endpoint on node-b (ipvs-proxy)", a.ns.NS, vip(svc["web-b"], 80), "web-b"},
		{"pod on node-b (ipvs-proxy) to a ClusterIP, endpoint on node-a (kube-proxy)", clientB.ns, vip(svc["web-a"], 80), "web-a"},
		{"node-b's host (ipvs-proxy) to a ClusterIP, endpoint on node-a (kube-proxy)", b.ns.NS, vip(svc["web-a"], 80), "web-a"},
		{"external client to node-a's NodePort (kube-proxy), endpoint on node-b (ipvs-proxy)", f.runner, np(a, "web-b"), "web-b"},
		{"external client to node-b's NodePort (ipvs-proxy), endpoint on node-a (kube-proxy)", f.runner, np(b, "web-a"), "web-a"},
		{"external client to node-c's NodePort (ipvs-proxy), endpoint on node-a (kube-proxy)", f.runner, np(c, "web-a"), "web-a"},
	}
	for _, ch := range checks {
		t.Run(ch.what, func(t *testing.T) {
			dialUntilAll(t, ch.what+" "+ch.to.String(), []string{ch.want}, 5, func() (string, error) {
				return hostnameOverHTTP(ch.from, ch.to, 5*time.Second)
			})
		})
	}
	for _, p := range []struct {
		from pod
		to   netip.AddrPort
	}{{clientA, vip(svc["web-b"], 80)}, {clientB, vip(svc["web-a"], 80)}} {
		got, err := clientIP(p.from.ns, p.to, netip.Addr{}, 5*time.Second)
		if err != nil || got != p.from.ip {
			t.Errorf("%s (%s) to %s: the endpoint saw %v (%v), want the pod's own address", p.from.name, p.from.ip, p.to, got, err)
		}
	}
	f.kubeProxyClean(t)
	for _, n := range []*bedNode{b, c} {
		m, err := proxyMetrics(n)
		if err != nil {
			t.Errorf("%s: %v", n.name, err)
			continue
		}
		t.Logf("%s ipvs-proxy: ipvs_proxy_apply_errors_total %v, ipvs_proxy_syncs_total %v",
			n.name, m.Sum("ipvs_proxy_apply_errors_total"), m.Sum("ipvs_proxy_syncs_total"))
		if v := m.Sum("ipvs_proxy_apply_errors_total"); v != 0 {
			t.Errorf("%s: ipvs_proxy_apply_errors_total %v, want 0", n.name, v)
		}
	}
}

// kpSyncedAfter waits until kube-proxy has ended two syncs after when.
func (f *fleet) kpSyncedAfter(t *testing.T, when time.Time) {
	t.Helper()
	first, err := f.kp.WaitSync(1, when, 3*time.Minute)
	if err == nil {
		_, err = f.kp.WaitSync(1, first, 3*time.Minute)
	}
	if err != nil {
		t.Fatalf("kube-proxy on %s: %v", f.kpNode.name, err)
	}
	t.Logf("kube-proxy on %s synced twice %v after the objects were created", f.kpNode.name, time.Since(when).Round(time.Millisecond))
}

// kubeProxyClean checks that kube-proxy syncs cleanly on the node it took
// back: /healthz 200, no iptables-restore failure in its metrics, no ipset
// error in its log.
func (f *fleet) kubeProxyClean(t *testing.T) {
	t.Helper()
	m, err := f.kp.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	ipsetErrs := f.kp.IPSetErrors()
	code, body, herr := f.kp.Healthz()
	t.Logf("kube-proxy on %s: /healthz %d; kubeproxy_sync_proxy_rules_duration_seconds_count %v, iptables restore failures %v; ipset errors in its log: %d",
		f.kpNode.name, code, m.Sum("kubeproxy_sync_proxy_rules_duration_seconds_count"),
		m.Sum("kubeproxy_sync_proxy_rules_iptables_restore_failures_total"), len(ipsetErrs))
	if herr != nil || code != 200 {
		t.Errorf("kube-proxy /healthz: %d %v %s", code, herr, body)
	}
	if v := m.Sum("kubeproxy_sync_proxy_rules_iptables_restore_failures_total"); v != 0 {
		t.Errorf("kubeproxy_sync_proxy_rules_iptables_restore_failures_total %v, want 0", v)
	}
	if len(ipsetErrs) > 0 {
		t.Errorf("kube-proxy logged %d ipset errors, first: %s", len(ipsetErrs), ipsetErrs[0])
	}
}

// proxyMetrics reads a node's ipvs-proxy /metrics (its default
// --metrics-bind-address, kube-proxy's).
func proxyMetrics(n *bedNode) (kubeproxy.Metrics, error) {
	code, body, err := n.ns.HTTPGet(kubeproxy.MetricsAddress, "/metrics", 10*time.Second)
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("%s: ipvs-proxy /metrics: status %d", n.name, code)
	}
	return kubeproxy.ParseMetrics(body)
}
