//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// dnsNode runs CoreDNS (the kubeadm cluster's coredns pods, one here).
const dnsNode = "node-a"

// startClusterDNS runs the bed's cluster DNS from bin (CLUSTER_COREDNS_BIN,
// tools/coredns): the kube-system/kube-dns Service at cluster.DNSAddr and
// CoreDNS as its one pod (hostNetwork on node-a, reading the API server
// with the proxies' kubeconfig), and waits until the pod is Ready and the
// Service's EndpointSlice lists it. From then on the agents give every
// pod a resolv.conf naming kube-dns (agent.clusterDNS).
func (b *bed) startClusterDNS(t *testing.T, bin string) {
	t.Helper()
	if b.upstreamDir == "" {
		t.Fatal("cluster DNS: the agents run CoreDNS as a process only in the upstream bed (CLUSTER_UPSTREAM_DIR)")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	corefile := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(cluster.Corefile(b.proxyKC,
		netip.AddrPortFrom(netip.IPv4Unspecified(), 53), netip.AddrPortFrom(netip.IPv4Unspecified(), cluster.DNSReadyPort))), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.CoreV1().Services(cluster.DNSNamespace).Create(ctx, cluster.DNSServiceObject(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("cluster DNS: %v", err)
	}
	// The pod's ServiceAccount admission needs kube-system's default one.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.client.CoreV1().ServiceAccounts(cluster.DNSNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("cluster DNS: no default ServiceAccount in %s: %v", cluster.DNSNamespace, err)
	}
	linkNslookup(t)
	// CoreDNS' own log (the agent's container log) says why it is not
	// ready or answers wrong.
	t.Cleanup(func() {
		if t.Failed() {
			log, err := os.ReadFile(filepath.Join(b.node(t, dnsNode).agent.logDir, cluster.DNSNamespace+"_coredns_coredns.log"))
			t.Logf("CoreDNS log (%v):\n%s", err, log)
		}
	})
	b.startPodObject(t, cluster.DNSNamespace, cluster.CoreDNSPod(dnsNode, bin, corefile), true)
	eventually(t, "kube-dns' EndpointSlice lists a ready CoreDNS", time.Minute, func() error {
		return readyEndpoint(ctx, b, cluster.DNSNamespace, cluster.DNSService)
	})
	// CoreDNS' ready plugin may say ready before the kubernetes plugin
	// has registered with it: wait for an answer through the VIP, from
	// every node (node-a's own IPVS to a local real server, the others'
	// across the LAN).
	fqdn := cluster.DNSService + "." + cluster.DNSNamespace + ".svc." + cluster.ClusterDomain
	for _, n := range b.nodes {
		eventually(t, n.name+" resolves "+fqdn+" at "+cluster.DNSAddr.String(), time.Minute, func() error {
			out, err := n.ns.Exec("busybox", "nslookup", fqdn, cluster.DNSAddr.String())
			if err != nil {
				return err
			}
			if !strings.Contains(out, "Name:") {
				return fmt.Errorf("no answer: %q", out)
			}
			return nil
		})
	}
	for _, n := range b.nodes {
		n.agent.mu.Lock()
		n.agent.clusterDNS = cluster.DNSAddr
		n.agent.mu.Unlock()
	}
	b.dns = true
	t.Logf("cluster DNS: CoreDNS on %s behind %s/%s %s, ready in %v", dnsNode, cluster.DNSNamespace, cluster.DNSService,
		cluster.DNSAddr, time.Since(start).Round(time.Millisecond))
}

// nslookupLink is where the bed links busybox's nslookup when the VM's
// root filesystem has none: upstream's jig resolves an ExternalName
// Service with `nslookup NAME` in its exec pod (a container image's tool,
// the VM's here).
const nslookupLink = "/usr/local/bin/nslookup"

// linkNslookup links nslookupLink to busybox (the VM's root is a
// writable overlay) unless an nslookup is on PATH already.
func linkNslookup(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("nslookup"); err == nil {
		return
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("cluster DNS: no nslookup and no busybox to provide one: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(nslookupLink), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bb, nslookupLink); err != nil {
		t.Fatalf("cluster DNS: ln -s %s %s: %v", bb, nslookupLink, err)
	}
}

// readyEndpoint is nil once an EndpointSlice of Service ns/name lists a
// ready endpoint.
func readyEndpoint(ctx context.Context, b *bed, ns, name string) error {
	list, err := b.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + name})
	if err != nil {
		return err
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				return nil
			}
		}
	}
	return fmt.Errorf("no ready endpoint in %d EndpointSlices of %s/%s", len(list.Items), ns, name)
}

// writeResolvConf writes the pod's resolv.conf, as kubelet makes it, into
// the agent's directory and returns its path; "" when the bed has no
// cluster DNS or the pod uses its node's resolver.
func (a *agent) writeResolvConf(pod *corev1.Pod) (string, error) {
	a.mu.Lock()
	nameserver := a.clusterDNS
	a.mu.Unlock()
	if !nameserver.IsValid() {
		return "", nil
	}
	conf, ok := cluster.ResolvConf(pod, nameserver)
	if !ok {
		return "", nil
	}
	path := filepath.Join(a.logDir, fmt.Sprintf("%s_%s_resolv.conf", pod.Namespace, pod.Name))
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		return "", fmt.Errorf("pod %s/%s: resolv.conf: %w", pod.Namespace, pod.Name, err)
	}
	return path, nil
}

// inPod is the argv of unshare(1) that runs argv as a process of the
// pod: in a UTS namespace named hostname when hostname is set, and, when
// resolvConf is set, in a mount namespace of its own (private: nothing
// propagates back) where resolvConf is bind-mounted on /etc/resolv.conf,
// as `ip netns exec` does with /etc/netns/NAME/resolv.conf. unshare execs
// sh, sh execs argv: one process, its exit code and signals are argv's.
func inPod(hostname, resolvConf string, argv []string) []string {
	var flags, steps, params []string
	if resolvConf != "" {
		flags = append(flags, "--mount")
		steps = append(steps, `mount --bind "$1" /etc/resolv.conf`)
		params = append(params, resolvConf)
	}
	if hostname != "" {
		flags = append(flags, "--uts")
		steps = append(steps, `hostname "$0"`)
	}
	// $0 is the hostname (or "pod"), $1 resolvConf when set; shift leaves argv in $@.
	name := hostname
	if name == "" {
		name = "pod"
	}
	script := strings.Join(append(steps, fmt.Sprintf(`shift %d`, len(params)), `exec "$@"`), " && ")
	out := append(flags, "--", "sh", "-c", script, name)
	out = append(out, params...)
	return append(out, argv...)
}

// clusterDNSTests: names resolve in a pod through kube-dns, itself
// reached through the nodes' ipvs-proxy, and a request by a Service's
// name reaches its backend.
func (b *bed) clusterDNSTests(t *testing.T) {
	t.Run("bed: a pod resolves Services by name through kube-dns", b.resolveByName)
}

// resolveByName: a client pod on node-c (CoreDNS runs on node-a: its
// queries cross nodes through node-c's IPVS) sees kubelet's resolv.conf
// in an exec'd command, resolves the kube-dns Service by its full name
// and a Service of its own namespace by its short name (the search path)
// to their ClusterIPs, and a curl of http://SHORTNAME/hostname is
// answered by the Service's backend on node-b.
func (b *bed) resolveByName(t *testing.T) {
	ns := b.testNamespace(t, "dns-by-name")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	labels := map[string]string{"app": "dnsweb"}
	b.runPod(t, ns, podSpec{name: "web", node: "node-b", labels: labels, netexec: []string{"--http-port=8080"}, readyPort: 8080})
	web := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dnsweb"}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}})
	b.runPod(t, ns, podSpec{name: "client", node: "node-c"})
	eventually(t, "dnsweb's EndpointSlice lists web", time.Minute, func() error { return readyEndpoint(ctx, b, ns, "dnsweb") })

	exec := func(cmd ...string) string {
		t.Helper()
		out, stderr, err := podExec(ctx, b.cfg, b.client, "websocket", ns, "client", "", cmd...)
		if err != nil {
			t.Fatalf("exec %q in %s/client: %v (stdout %q, stderr %q)", cmd, ns, err, out, stderr)
		}
		return out
	}
	want := fmt.Sprintf("nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", cluster.DNSAddr, ns)
	if got := exec("cat", "/etc/resolv.conf"); got != want {
		t.Fatalf("exec'd /etc/resolv.conf:\n%s\nwant:\n%s", got, want)
	}
	for _, tc := range []struct{ name, want string }{
		{cluster.DNSService + "." + cluster.DNSNamespace + ".svc.cluster.local", cluster.DNSAddr.String()},
		{"dnsweb", web.Spec.ClusterIP},
		{"dnsweb." + ns, web.Spec.ClusterIP},
	} {
		start := time.Now()
		out := exec("getent", "hosts", tc.name)
		if f := strings.Fields(out); len(f) < 2 || f[0] != tc.want {
			t.Errorf("getent hosts %s: %q, want %s", tc.name, out, tc.want)
			continue
		}
		t.Logf("getent hosts %s: %s in %v", tc.name, strings.TrimSpace(out), time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	// curl resolves with glibc (resolv.conf); busybox's static wget
	// crashes in glibc's NSS.
	if got := exec("curl", "-sS", "-m", "5", "http://dnsweb/hostname"); got != "web" {
		t.Errorf("curl http://dnsweb/hostname from %s/client: %q, want web (the backend's hostname)", ns, got)
	} else {
		t.Logf("curl http://dnsweb/hostname: %q in %v", got, time.Since(start).Round(time.Millisecond))
	}
}

// podResolvConf is the resolv.conf the agent gave pod namespace/name, or
// "" (no cluster DNS, the node's resolver, or not on this node).
func (a *agent) podResolvConf(namespace, name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.pods {
		if r.namespace == namespace && r.name == name {
			return r.resolvConf
		}
	}
	return ""
}
