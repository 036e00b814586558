//go:build kernel

package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	testNS   = "e2e-daemon"
	thisNode = "n1"
	nodePort = 30080
	// syncPeriod is the proxy's --sync-period.
	syncPeriod = 5 * time.Second
	// triggerAnnotation is endpoints.kubernetes.io/last-change-trigger-time.
	triggerAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"
)

// startProxy runs `ipvs-proxy run` in the node namespace.
func startProxy(t *testing.T, node *ktest.Node, bin, kubeconfig, stateDir string) *ktest.Process {
	t.Helper()
	return harness.StartProxy(t, node.NS, harness.Proxy{Bin: bin, Kubeconfig: kubeconfig, Node: thisNode,
		SyncPeriod: syncPeriod, StateDir: stateDir})
}

// active is `ipvsadm -S -n` without the real servers at weight 0: those
// are in graceful termination and leave on their own, whatever the API.
func active(save string) string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		if !strings.HasSuffix(strings.TrimSpace(l), " -w 0") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func slice(name string, trigger time.Time, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name,
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "e2e"},
			Annotations: map[string]string{triggerAnnotation: trigger.UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(int32(ktest.BackendPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr.To(thisNode),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}})
	}
	return s
}

func TestDaemonGuest(t *testing.T) {
	ctx := context.Background()
	adminCfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "DAEMON_KUBECONFIG_ADMIN"))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(adminCfg)
	bin := vmtest.GuestEnv(t, "DAEMON_PROXY_BIN")
	proxyKC := vmtest.GuestEnv(t, "DAEMON_KUBECONFIG_PROXY")
	apiHostPort := strings.TrimPrefix(adminCfg.Host, "https://")

	node := ktest.NewNode(t)
	podA := node.AddPod(t, "pod-a")
	podB := node.AddPod(t, "pod-b")
	cli := node.AddClient(t, "cli")
	// The node namespace reaches the API server (10.0.2.100:PORT as the VM
	// sees it) through a relay on 127.0.0.1:PORT; cutting it closes the
	// listener and every open connection: to the proxy the server is gone.
	_, apiPort, err := net.SplitHostPort(apiHostPort)
	if err != nil {
		t.Fatal(err)
	}
	relayAddr := "127.0.0.1:" + apiPort
	cutRelay := node.Relay(t, relayAddr, apiHostPort)
	a, b := podA.Addrs[0].String(), podB.Addrs[0].String()
	nodeIP := ktest.NodeIPv4.String()

	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}))
	must(client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: thisNode},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}}}, metav1.CreateOptions{}))
	must(client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.2"}}}}, metav1.CreateOptions{}))

	stateDir := t.TempDir()
	start := time.Now()
	p := startProxy(t, node, bin, proxyKC, stateDir)

	// A NodePort Service whose externalIPs hold the node's own address.
	svc, err := client.CoreV1().Services(testNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalIPs: []string{nodeIP},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(ktest.BackendPort), NodePort: nodePort, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := svc.Spec.ClusterIP + ":80"
	must(client.DiscoveryV1().EndpointSlices(testNS).Create(ctx, slice("web-1", time.Now(), a), metav1.CreateOptions{}))

	answeredBy := func(addr, pod string) func() bool {
		return func() bool {
			out, err := cli.Request(ktest.TCP, addr)
			return err == nil && strings.HasPrefix(out, pod+" ")
		}
	}
	harness.WaitUntil(t, "ClusterIP "+vip+" answered by pod-a", 3*time.Minute, 100*time.Millisecond, answeredBy(vip, "pod-a"))
	first := time.Since(start)
	t.Logf("first ClusterIP answer %v after the proxy started", first)
	if !p.Alive() {
		t.Fatal("proxy exited")
	}
	np := fmt.Sprintf("%s:%d", nodeIP, nodePort)
	harness.WaitUntil(t, "NodePort "+np, 30*time.Second, 100*time.Millisecond, answeredBy(np, "pod-a"))

	// The node's own IP as an externalIP: not bound, and a Warning Event.
	if out := node.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0"); strings.Contains(out, " "+nodeIP+"/") {
		t.Fatalf("node IP %s bound on kube-ipvs0:\n%s", nodeIP, out)
	}
	var event corev1.Event
	harness.WaitUntil(t, "a Warning Event on Service web", time.Minute, 200*time.Millisecond, func() bool {
		evs, err := client.CoreV1().Events(testNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Service" && e.InvolvedObject.Name == "web" && e.Type == corev1.EventTypeWarning &&
				e.Source.Component == "ipvs-proxy" && strings.Contains(e.Message, nodeIP) {
				event = e
				return true
			}
		}
		return false
	})
	t.Logf("event: reason=%s source=%s/%s uid=%s message=%q", event.Reason, event.Source.Component, event.Source.Host,
		event.InvolvedObject.UID, event.Message)
	if event.Source.Host != thisNode || event.InvolvedObject.UID != svc.UID {
		t.Errorf("event source host %q uid %q, want %q and the Service's %q", event.Source.Host, event.InvolvedObject.UID, thisNode, svc.UID)
	}

	// Endpoint changes: from the API write to the first request answered by
	// the new backend, polled every 10 ms.
	var lat []time.Duration
	for i := 0; i < 6; i++ {
		to, pod := b, "pod-b"
		if i%2 == 1 {
			to, pod = a, "pod-a"
		}
		w := time.Now()
		must(client.DiscoveryV1().EndpointSlices(testNS).Update(ctx, slice("web-1", w, to), metav1.UpdateOptions{}))
		harness.WaitUntil(t, "endpoint change to "+pod, time.Minute, 10*time.Millisecond, answeredBy(vip, pod))
		lat = append(lat, time.Since(w))
	}
	slices.Sort(lat)

	// Health and metrics, as kube-proxy 1.34 serves them (issue 15, item 5).
	for _, path := range []string{"/healthz", "/livez"} {
		code, body, err := node.HTTPGet("127.0.0.1:10256", path, 10*time.Second)
		if err != nil || code != http.StatusOK {
			t.Errorf("%s: %d %v %s", path, code, err, body)
		}
		var h struct {
			LastUpdated, CurrentTime time.Time
			NodeEligible             *bool
			Healthy                  bool
			Status                   map[string]struct{ Healthy bool }
		}
		if err := json.Unmarshal([]byte(body), &h); err != nil || !h.Healthy || !h.Status["IPv4"].Healthy ||
			h.CurrentTime.IsZero() || (path == "/healthz") != (h.NodeEligible != nil) || (h.NodeEligible != nil && !*h.NodeEligible) {
			t.Errorf("%s body is not kube-proxy 1.34's for a healthy, eligible node: %v %s", path, err, body)
		}
	}
	if code, body, err := node.HTTPGet("127.0.0.1:10249", "/proxyMode", 10*time.Second); err != nil || code != http.StatusOK || body != "ipvs" {
		t.Errorf("/proxyMode: %d %v %q", code, err, body)
	}
	code, metrics, err := node.HTTPGet("127.0.0.1:10249", "/metrics", 10*time.Second)
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, want := range []string{
		`kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}`,
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}`,
		`kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="0.25"}`,
		"kubeproxy_sync_proxy_rules_endpoint_changes_total ", "kubeproxy_sync_proxy_rules_service_changes_total ",
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending ", "kubeproxy_sync_proxy_rules_service_changes_pending ",
		`kubeproxy_proxy_healthz_total{code="200"}`, `kubeproxy_proxy_livez_total{code="200"}`,
		`rest_client_requests_total{code="200"`, "ipvs_proxy_build_info{",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var metricLines []string
	for _, l := range strings.Split(metrics, "\n") {
		for _, m := range []string{"ipvs_proxy_sync_duration_seconds_sum", "ipvs_proxy_sync_duration_seconds_count",
			"ipvs_proxy_network_programming_duration_seconds_sum", "ipvs_proxy_network_programming_duration_seconds_count",
			"ipvs_proxy_virtual_servers", "ipvs_proxy_real_servers", "ipvs_proxy_addresses", "ipvs_proxy_refusals{",
			"ipvs_proxy_apply_errors_total"} {
			if strings.HasPrefix(l, m) {
				metricLines = append(metricLines, l)
			}
		}
	}
	if !strings.Contains(metrics, "ipvs_proxy_network_programming_duration_seconds_count") ||
		!strings.Contains(metrics, `ipvs_proxy_refusals{reason="NodeIP"}`) {
		t.Errorf("metrics lack network programming latency or the NodeIP refusal:\n%s", strings.Join(metricLines, "\n"))
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "node-addresses.json")); err != nil || !strings.Contains(string(b), nodeIP) {
		t.Errorf("node address cache: %v %s", err, b)
	}

	// The API server goes away: the kernel stays as it is and traffic
	// flows through two full resyncs.
	ipvsBefore := node.Run(t, "ipvsadm", "-S", "-n")
	addrsBefore := node.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	cutRelay()
	outageEnd := time.Now().Add(2*syncPeriod + 2*time.Second)
	served := 0
	for time.Now().Before(outageEnd) {
		if out := cli.MustRequest(t, ktest.TCP, vip); strings.HasPrefix(out, "pod-") {
			served++
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !p.Alive() {
		t.Fatal("proxy exited while the API server was unreachable")
	}
	if got := node.Run(t, "ipvsadm", "-S", "-n"); active(got) != active(ipvsBefore) {
		t.Errorf("IPVS changed during the outage (beyond graceful termination):\nbefore:\n%s\nafter:\n%s", ipvsBefore, got)
	}
	if got := node.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0"); got != addrsBefore {
		t.Errorf("kube-ipvs0 changed during the outage:\nbefore:\n%s\nafter:\n%s", addrsBefore, got)
	}
	// A change made meanwhile is applied once the server is back.
	must(client.DiscoveryV1().EndpointSlices(testNS).Update(ctx, slice("web-1", time.Now(), b), metav1.UpdateOptions{}))
	node.Relay(t, relayAddr, apiHostPort)
	back := harness.WaitUntil(t, "the change made during the outage", 3*time.Minute, 50*time.Millisecond, answeredBy(vip, "pod-b"))

	// SIGTERM: the proxy exits and leaves the kernel as it is. First let
	// graceful termination finish, so that nothing is due to change.
	harness.WaitUntil(t, "graceful termination to finish", 3*time.Minute, 500*time.Millisecond, func() bool {
		return !strings.Contains(node.Run(t, "ipvsadm", "-S", "-n"), " -w 0")
	})
	ipvsBefore = node.Run(t, "ipvsadm", "-S", "-n")
	addrsBefore = node.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	mon := exec.Command("ip", "-n", node.Name, "monitor", "address")
	var monOut strings.Builder
	mon.Stdout = &monOut
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("proxy after SIGTERM: %v", err)
	}
	if got := node.Run(t, "ipvsadm", "-S", "-n"); got != ipvsBefore {
		t.Errorf("IPVS changed at shutdown:\nbefore:\n%s\nafter:\n%s", ipvsBefore, got)
	}
	cli.MustRequest(t, ktest.TCP, vip)

	// Restart: the new process adopts the kernel state without changing
	// any object (its first full sync reports no change; no address event).
	restart := time.Now()
	p2 := startProxy(t, node, bin, proxyKC, stateDir)
	harness.WaitUntil(t, "the restarted proxy's first full sync", 3*time.Minute, 200*time.Millisecond, func() bool {
		return p2.OutputHas(`"sync done"`) || p2.OutputHas("sync done\t")
	})
	adopted := time.Since(restart)
	_ = mon.Process.Kill()
	_ = mon.Wait()
	var firstFull string
	for _, l := range strings.Split(p2.Output(), "\n") {
		if strings.Contains(l, "sync applied") && strings.Contains(l, `"mode": "full"`) {
			firstFull = l
			break
		}
	}
	if !strings.Contains(firstFull, `"ipvsChanges": 0, "bound": 0, "unbound": 0`) {
		t.Errorf("the restarted proxy's first full sync changed the kernel: %s", firstFull)
	}
	if got := node.Run(t, "ipvsadm", "-S", "-n"); got != ipvsBefore {
		t.Errorf("IPVS changed across the restart:\nbefore:\n%s\nafter:\n%s", ipvsBefore, got)
	}
	if got := node.Run(t, "ip", "-o", "addr", "show", "dev", "kube-ipvs0"); got != addrsBefore {
		t.Errorf("kube-ipvs0 changed across the restart:\nbefore:\n%s\nafter:\n%s", addrsBefore, got)
	}
	if strings.TrimSpace(monOut.String()) != "" {
		t.Errorf("address events during the restart:\n%s", monOut.String())
	}
	cli.MustRequest(t, ktest.TCP, vip)

	t.Logf("DAEMON-REPORT-BEGIN\nfirst ClusterIP answer after start: %v\nendpoint change to traffic (API write to first answer, 10 ms polling, TCG VM): min %v median %v max %v (n=%d)\nrequests served during the %v outage: %d\nchange made during the outage applied %v after the server came back\nrestart: first full sync done %v after start, no kernel change\nmetrics:\n%s\nDAEMON-REPORT-END",
		first, lat[0], lat[len(lat)/2], lat[len(lat)-1], len(lat), 2*syncPeriod+2*time.Second, served, back, adopted, strings.Join(metricLines, "\n"))
}
