//go:build kernel

package prometheus_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

const (
	vmNS     = "e2e-prom"
	vmNode   = "n1"
	leaseNS  = "ipvs-proxy"
	otherIP  = "198.51.100.20" // node n2's address: a Service asking for it is refused (NodeIP)
	metrics  = "127.0.0.1:10249"
	promAddr = "127.0.0.1:9090"
	// scrapeFor is how long Prometheus scrapes before the queries: more
	// than the dashboard's 1m rate window.
	scrapeFor = 75 * time.Second
)

func service(name string, externalIPs ...string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: vmNS, Name: name}, Spec: corev1.ServiceSpec{
		ExternalIPs: externalIPs,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(ktest.BackendPort),
			Protocol: corev1.ProtocolTCP}},
	}}
}

// slice is web's EndpointSlice with the given pods, stamped as the
// EndpointSlice controller stamps a change (the source of
// kubeproxy_network_programming_duration_seconds).
func slice(pods []*ktest.Pod, changed time.Time) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmNS, Name: "web-1",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "e2e"},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: changed.UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(ktest.BackendPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.Addrs[0].String()}, NodeName: ptr.To(vmNode),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}})
	}
	return s
}

// TestPrometheusGuest runs in the VM (TestPrometheusVM): Prometheus
// scrapes `ipvs-proxy run` as job="kube-proxy" while Services and
// EndpointSlices change, then kubernetes-mixin's kube-proxy queries and
// alerts and the component's rules are evaluated through its HTTP API.
func TestPrometheusGuest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := func(k string) string { return vmtest.GuestEnv(t, k) }
	adminCfg, err := clientcmd.BuildConfigFromFlags("", env("PROM_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(adminCfg)
	apiHostPort := strings.TrimPrefix(adminCfg.Host, "https://")
	_, apiPort, _ := net.SplitHostPort(apiHostPort)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	node := ktest.NewNode(t)
	pods := []*ktest.Pod{node.AddPod(t, "pod-a"), node.AddPod(t, "pod-b")}
	node.AddClient(t, "cli") // the node's LAN: eth0 holds its address, NodeIPv4

	node.Relay(t, "127.0.0.1:"+apiPort, apiHostPort)
	for _, ns := range []string{vmNS, leaseNS} {
		must(client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	for name, ip := range map[string]string{vmNode: ktest.NodeIPv4.String(), "n2": otherIP} {
		must(client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}, metav1.CreateOptions{}))
	}
	must(client.CoreV1().Services(vmNS).Create(ctx, service("web"), metav1.CreateOptions{}))
	must(client.DiscoveryV1().EndpointSlices(vmNS).Create(ctx, slice(pods[:1], time.Now()), metav1.CreateOptions{}))

	harness.StartProxy(t, node.NS, harness.Proxy{Bin: env("PROM_PROXY_BIN"), Kubeconfig: env("PROM_KUBECONFIG_PROXY"),
		Node: vmNode, StateDir: t.TempDir(), MetricsAddr: metrics, Flags: []string{"--events-lease-namespace", leaseNS}})
	harness.WaitUntil(t, "the proxy's first full sync (/healthz 200)", 3*time.Minute, 200*time.Millisecond, func() bool {
		code, _, _ := node.HTTPGet("127.0.0.1:10256", "/healthz", 2*time.Second)
		return code == 200
	})

	web, err := client.CoreV1().Services(vmNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	webAddr := net.JoinHostPort(web.Spec.ClusterIP, "80")

	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 2s
rule_files: [%s]
scrape_configs:
- job_name: kube-proxy
  static_configs:
  - targets: ['%s']
`, env("PROM_RULES"), metrics)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promStart := time.Now()
	node.Start(t, filepath.Join(dir, "prometheus.log"), env("PROM_BIN"), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	p := &promAPI{node: node}
	harness.WaitUntil(t, "Prometheus ready (/-/ready)", 3*time.Minute, 200*time.Millisecond, func() bool {
		code, _, _ := node.HTTPGet(promAddr, "/-/ready", 2*time.Second)
		return code == 200
	})
	t.Logf("Prometheus ready %.1fs after its start", time.Since(promStart).Seconds())

	// Changes while Prometheus scrapes: web's endpoints flip every 3 s
	// (network programming, partial syncs) and a Service asking for node
	// n2's address is created every other time (a refusal: an Event POST);
	// a request goes through web's ClusterIP each time (its per-Service
	// series).
	churned := make(chan int, 1)
	var churnErrs []error // read after churned
	go func() {
		n := 0
		defer func() { churned <- n }()
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n++
			if _, err := node.Request(ktest.TCP, webAddr); err != nil && ctx.Err() == nil {
				churnErrs = append(churnErrs, fmt.Errorf("request to web %s: %w", webAddr, err))
			}
			cur, err := client.DiscoveryV1().EndpointSlices(vmNS).Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil {
				continue
			}
			next := slice(pods[:1+n%2], time.Now())
			next.ResourceVersion = cur.ResourceVersion
			if _, err := client.DiscoveryV1().EndpointSlices(vmNS).Update(ctx, next, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				churnErrs = append(churnErrs, err)
			}
			if n%2 == 0 {
				_, err := client.CoreV1().Services(vmNS).Create(ctx, service(fmt.Sprintf("asks-n2-%d", n), otherIP), metav1.CreateOptions{})
				if err != nil && ctx.Err() == nil {
					churnErrs = append(churnErrs, err)
				}
			}
		}
	}()
	time.Sleep(time.Until(promStart.Add(scrapeFor)))

	checkTargets(t, p)
	checkDashboard(t, p, "testdata/kube-proxy-dashboard.yaml")
	checkGrafanaDashboard(t, p, strings.Split(env("PROM_RULES"), ","))
	checkServiceTraffic(t, p)
	cancel()
	t.Logf("%d EndpointSlice changes while Prometheus scraped", <-churned)
	for _, err := range churnErrs {
		t.Errorf("changing the objects: %v", err)
	}
	checkRules(t, p)
}
