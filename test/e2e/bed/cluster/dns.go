package cluster

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The bed's cluster DNS, as kubeadm sets it up: CoreDNS (tools/coredns)
// behind the kube-system/kube-dns Service, whose ClusterIP is the tenth
// address of the service CIDR (apiserver.DefaultServiceClusterIPRange's
// 10.96.0.0/16), served through the nodes' ipvs-proxy like any Service.
const (
	ClusterDomain = "cluster.local"
	DNSNamespace  = "kube-system"
	DNSService    = "kube-dns"
	// DNSReadyPort is CoreDNS' ready plugin's port (kubeadm's 8181),
	// the pod's readiness probe.
	DNSReadyPort = 8181
)

// DNSAddr is kube-dns' ClusterIP, the nameserver of every pod.
var DNSAddr = netip.MustParseAddr("10.96.0.10")

// dnsLabels select CoreDNS' pods, as kubeadm labels them.
var dnsLabels = map[string]string{"k8s-app": "kube-dns"}

// Corefile is CoreDNS' configuration for the bed: the kubernetes plugin
// answers for cluster.local and the reverse zones, reading the API
// server with kubeconfig; nothing is forwarded (no forward plugin: a name
// outside the cluster is answered SERVFAIL, no query leaves the VM). It
// serves DNS at dns and its readiness at ready (/ready); an unspecified
// address is every address of the namespace, as kubeadm's CoreDNS.
func Corefile(kubeconfig string, dns, ready netip.AddrPort) string {
	bind, readyAt := "", fmt.Sprintf(":%d", ready.Port())
	if !dns.Addr().IsUnspecified() {
		bind = fmt.Sprintf("\n    bind %s", dns.Addr())
	}
	if !ready.Addr().IsUnspecified() {
		readyAt = ready.String()
	}
	return fmt.Sprintf(`.:%d {%s
    errors
    ready %s
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        ttl 30
    }
    cache 30
}
`, dns.Port(), bind, readyAt, ClusterDomain, kubeconfig)
}

// DNSServiceObject is the kube-system/kube-dns Service: 53/UDP and
// 53/TCP at DNSAddr, selecting CoreDNS' pods.
func DNSServiceObject() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: DNSService, Namespace: DNSNamespace, Labels: dnsLabels},
		Spec: corev1.ServiceSpec{
			ClusterIP: DNSAddr.String(),
			Selector:  dnsLabels,
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
}

// CoreDNSPod is CoreDNS' pod on node: bin run with corefile, in the
// node's network namespace (hostNetwork: it reaches the API server as the
// node's proxy does, at 127.0.0.1), Ready once the kubernetes plugin has
// synced (the ready plugin). Its dnsPolicy is Default: the node's
// resolver, not itself.
func CoreDNSPod(node, bin, corefile string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: DNSNamespace, Labels: dnsLabels},
		Spec: corev1.PodSpec{
			NodeName:    node,
			HostNetwork: true,
			DNSPolicy:   corev1.DNSDefault,
			Containers: []corev1.Container{{
				Name:    "coredns",
				Image:   "registry.k8s.io/coredns/coredns:v1.12.1",
				Command: []string{bin, "-conf", corefile},
				Ports: []corev1.ContainerPort{
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/ready", Port: intstr.FromInt32(DNSReadyPort)}}},
			}},
		},
	}
}

// ResolvConf is the /etc/resolv.conf kubelet gives pod when the cluster's
// DNS is at nameserver: for dnsPolicy ClusterFirst (the default; a
// hostNetwork pod only with ClusterFirstWithHostNet) the cluster's
// nameserver, the search path NS.svc.DOMAIN svc.DOMAIN DOMAIN and ndots:5;
// for None only what spec.dnsConfig says; spec.dnsConfig's nameservers,
// searches and options are added to the cluster's. ok is false when the
// pod uses its node's resolver (dnsPolicy Default, or ClusterFirst with
// hostNetwork).
func ResolvConf(pod *corev1.Pod, nameserver netip.Addr) (conf []byte, ok bool) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	var servers, search []string
	options := map[string]string{}
	var order []string
	setOption := func(name, value string) {
		if _, seen := options[name]; !seen {
			order = append(order, name)
		}
		options[name] = value
	}
	switch {
	case policy == corev1.DNSNone:
	case policy == corev1.DNSClusterFirstWithHostNet,
		policy == corev1.DNSClusterFirst && !pod.Spec.HostNetwork:
		servers = []string{nameserver.String()}
		search = []string{pod.Namespace + ".svc." + ClusterDomain, "svc." + ClusterDomain, ClusterDomain}
		setOption("ndots", "5")
	default:
		return nil, false
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = append(servers, c.Nameservers...)
		search = append(search, c.Searches...)
		for _, o := range c.Options {
			value := ""
			if o.Value != nil {
				value = *o.Value
			}
			setOption(o.Name, value)
		}
	}
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}
	if len(order) > 0 {
		opts := make([]string, 0, len(order))
		for _, name := range order {
			if v := options[name]; v != "" {
				opts = append(opts, name+":"+v)
			} else {
				opts = append(opts, name)
			}
		}
		fmt.Fprintf(&b, "options %s\n", strings.Join(opts, " "))
	}
	return []byte(b.String()), true
}
