//go:build kernel

package cluster_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// agentPort is where node-b's "node agent" listens on node-b's address: a
// hostNetwork netexec on the kubelet's port, answering /hostName with the
// node's name.
const agentPort = 10250

// disaster is the seed's disaster across real nodes: a Service whose
// externalIP is node-b's address. What must reach node-b: the hosts of
// every node, a pod on node-a and one on node-c, and the external client.
type disaster struct {
	f                *fleet
	namespace        string
	clientA, clientC pod
}

// victim is where node-b's agent answers.
func (d *disaster) victim(t *testing.T) netip.AddrPort {
	return netip.AddrPortFrom(d.f.node(t, "node-b").ip, agentPort)
}

// newDisaster starts node-b's agent (hostNetwork), the Service's endpoint
// on node-c and the client pods.
func (f *fleet) newDisaster(t *testing.T) *disaster {
	t.Helper()
	d := &disaster{f: f, namespace: f.testNamespace(t, "disaster")}
	f.runPod(t, d.namespace, podSpec{name: "node-b-agent", node: "node-b", hostNetwork: true,
		netexec: []string{"--http-port=10250"}, readyPort: agentPort})
	f.runPod(t, d.namespace, podSpec{name: "web", node: "node-c", labels: map[string]string{"app": "web"},
		netexec: []string{"--http-port=8080"}, readyPort: 8080})
	d.clientA = f.runPod(t, d.namespace, podSpec{name: "client-a", node: "node-a"})
	d.clientC = f.runPod(t, d.namespace, podSpec{name: "client-c", node: "node-c"})
	return d
}

// createService creates node-b-address: port 80 of the web pod, with
// node-b's address as its externalIP.
func (d *disaster) createService(t *testing.T) *corev1.Service {
	t.Helper()
	return d.f.createService(t, d.namespace, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "node-b-address"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ExternalIPs: []string{d.f.node(t, "node-b").ip.String()},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080), Protocol: corev1.ProtocolTCP}}}})
}

// sources are the places node-b must be reachable from, by name.
func (d *disaster) sources(t *testing.T) map[string]*ktest.NS {
	f := d.f
	return map[string]*ktest.NS{"node-a": f.node(t, "node-a").ns.NS, "node-b": f.node(t, "node-b").ns.NS,
		"node-c": f.node(t, "node-c").ns.NS, "pod client-a on node-a": d.clientA.ns,
		"pod client-c on node-c": d.clientC.ns, "external client": f.runner}
}

// reaches checks that node-b's agent answers from each of the named sources.
func (d *disaster) reaches(t *testing.T, from ...string) {
	t.Helper()
	src := d.sources(t)
	for _, name := range from {
		dialUntilAll(t, name+" to node-b's agent "+d.victim(t).String(), []string{"node-b"}, 5, func() (string, error) {
			return hostnameOverHTTP(src[name], d.victim(t), 3*time.Second)
		})
	}
}

// lost checks that node-b's agent does not answer from each of the named
// sources (three tries each), and logs what they get instead.
func (d *disaster) lost(t *testing.T, from ...string) {
	t.Helper()
	src := d.sources(t)
	for _, name := range from {
		var got []string
		for i := 0; i < 3; i++ {
			out, err := hostnameOverHTTP(src[name], d.victim(t), 3*time.Second)
			if err == nil && out == "node-b" {
				t.Errorf("%s reached node-b's agent %s: node-b is not lost", name, d.victim(t))
				break
			}
			got = append(got, strings.TrimSpace(out+" "+errString(err)))
			time.Sleep(time.Second)
		}
		t.Logf("%s to node-b's agent %s: %v", name, d.victim(t), got)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// kubeIPVS0Has reports whether addr is bound on node's kube-ipvs0 (`ip -o
// addr show dev kube-ipvs0`).
func kubeIPVS0Has(t *testing.T, n *bedNode, addr netip.Addr) bool {
	t.Helper()
	out, err := n.ns.Exec("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(out, " "+addr.String()+"/32 ")
}

// guarded: with ipvs-proxy on every node, the Service is refused with a
// Warning Event by node-a and node-c, node-a's kube-ipvs0 never holds
// node-b's address, the Service's ClusterIP still serves, and node-b's
// agent answers from every node and pod.
func (d *disaster) guarded(t *testing.T) {
	f := d.f
	a, bIP := f.node(t, "node-a"), f.node(t, "node-b").ip
	svc := d.createService(t)
	defer func() {
		if err := f.client.CoreV1().Services(d.namespace).Delete(context.Background(), svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}()
	eventually(t, "Warning Events refusing externalIP "+bIP.String()+" from node-a and node-c", time.Minute, func() error {
		list, err := f.client.CoreV1().Events(d.namespace).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + svc.Name + ",type=" + corev1.EventTypeWarning})
		if err != nil {
			return err
		}
		var hosts []string
		for _, ev := range list.Items {
			if ev.Reason == string(model.ReasonNodeIP) && strings.Contains(ev.Message, bIP.String()) {
				hosts = append(hosts, ev.Source.Host)
				t.Logf("event from %s: %s %s: %s", ev.Source.Host, ev.Type, ev.Reason, ev.Message)
			}
		}
		if !slices.Contains(hosts, "node-a") || !slices.Contains(hosts, "node-c") {
			return errors.New("NodeIP Warning Events from " + strings.Join(hosts, ", "))
		}
		return nil
	})
	dialUntilAll(t, "pod client-a to the Service's ClusterIP", []string{"web"}, 30, func() (string, error) {
		return hostnameOverHTTP(d.clientA.ns, vip(svc, 80), 3*time.Second)
	})
	if kubeIPVS0Has(t, a, bIP) {
		t.Errorf("ipvs-proxy bound node-b's address %s on node-a's kube-ipvs0", bIP)
	}
	d.reaches(t, "node-a", "node-b", "node-c", "pod client-a on node-a", "pod client-c on node-c", "external client")
}

// underKubeProxy: kube-proxy on node-a binds node-b's address on its
// kube-ipvs0, so node-a and its pods lose node-b while the ipvs-proxy nodes
// keep it (the reproduction). kube-proxy is stopped (the kernel state
// stays, node-b stays lost), node-a is cut off from the API server, and
// `ipvs-proxy recover --apply` on node-a, from the node and its
// node-addresses.json alone, removes the address: node-b answers again.
func (d *disaster) underKubeProxy(t *testing.T) {
	f := d.f
	a, bIP := f.node(t, "node-a"), f.node(t, "node-b").ip
	d.createService(t)
	eventually(t, "kube-proxy binds node-b's address on node-a's kube-ipvs0", 3*time.Minute, func() error {
		if !kubeIPVS0Has(t, a, bIP) {
			return errors.New("not bound yet")
		}
		return nil
	})
	route, _ := a.ns.Exec("ip", "route", "get", bIP.String())
	t.Logf("node-a# ip route get %s: %s", bIP, strings.TrimSpace(route))
	d.lost(t, "node-a", "pod client-a on node-a")
	d.reaches(t, "node-b", "node-c", "pod client-c on node-c", "external client")

	// The operator stops the proxy that binds it; its state stays.
	if _, err := f.kp.Stop(30 * time.Second); err != nil {
		t.Errorf("kube-proxy after SIGTERM: %v", err)
	}
	d.lost(t, "node-a")

	// The API server unreachable from node-a: recover works offline.
	proxyKC := vmtest.GuestEnv(t, "CLUSTER_KUBECONFIG_PROXY")
	cfg, err := clientcmd.BuildConfigFromFlags("", proxyKC)
	if err != nil {
		t.Fatal(err)
	}
	a.stopRelay()
	if err := a.ns.Do(func() error {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(cfg.Host, "https://"), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err == nil {
		t.Fatalf("the API server %s still answers on node-a", cfg.Host)
	}
	start := time.Now()
	out, err := a.ns.Exec(vmtest.GuestEnv(t, "CLUSTER_PROXY_BIN"), "recover", "--kubeconfig", proxyKC,
		"--hostname-override", a.name, "--state-dir", a.proxy.stateDir, "--cluster-cidr", clusterCIDR.String(), "--apply")
	t.Logf("node-a# ipvs-proxy recover --apply (%v): %v\n%s", time.Since(start).Round(time.Millisecond), err, out)
	// Removed is success, exit status 0 (docs/flags.md#exit-status).
	if err != nil {
		t.Errorf("recover --apply: %v, want exit status 0 (removed)", err)
	}
	for _, want := range []string{"unreachable", bIP.String() + "/32", string(model.ReasonNodeIP)} {
		if !strings.Contains(out, want) {
			t.Errorf("recover --apply's report lacks %q", want)
		}
	}
	if kubeIPVS0Has(t, a, bIP) {
		t.Errorf("node-b's address %s still on node-a's kube-ipvs0 after recover --apply", bIP)
	}
	d.reaches(t, "node-a", "pod client-a on node-a", "node-c", "external client")
}
