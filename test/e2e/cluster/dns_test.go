package cluster_test

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestDNSAddr: kube-dns' ClusterIP is the tenth address of the bed's
// IPv4 service CIDR, as kubeadm picks it.
func TestDNSAddr(t *testing.T) {
	cidr := netip.MustParsePrefix(strings.Split(apiserver.DefaultServiceClusterIPRange, ",")[0])
	want := cidr.Masked().Addr()
	for range 10 {
		want = want.Next()
	}
	if cluster.DNSAddr != want {
		t.Errorf("DNSAddr %s, want %s (the tenth address of %s)", cluster.DNSAddr, want, cidr)
	}
}

// TestResolvConf: kubelet's resolv.conf for each dnsPolicy.
func TestResolvConf(t *testing.T) {
	ns := netip.MustParseAddr("10.96.0.10")
	const cluster1 = "nameserver 10.96.0.10\nsearch web.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
	for _, tc := range []struct {
		name   string
		spec   corev1.PodSpec
		want   string
		useOwn bool // the cluster's resolver, not the node's
	}{
		{name: "default policy", spec: corev1.PodSpec{}, want: cluster1, useOwn: true},
		{name: "ClusterFirst", spec: corev1.PodSpec{DNSPolicy: corev1.DNSClusterFirst}, want: cluster1, useOwn: true},
		{name: "ClusterFirst hostNetwork: the node's", spec: corev1.PodSpec{HostNetwork: true}},
		{name: "ClusterFirstWithHostNet", spec: corev1.PodSpec{HostNetwork: true, DNSPolicy: corev1.DNSClusterFirstWithHostNet}, want: cluster1, useOwn: true},
		{name: "Default: the node's", spec: corev1.PodSpec{DNSPolicy: corev1.DNSDefault}},
		{name: "None with dnsConfig", spec: corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{
			Nameservers: []string{"1.2.3.4"}, Searches: []string{"example.test"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}}},
			want: "nameserver 1.2.3.4\nsearch example.test\noptions ndots:2 edns0\n", useOwn: true},
		{name: "ClusterFirst with dnsConfig", spec: corev1.PodSpec{DNSConfig: &corev1.PodDNSConfig{
			Searches: []string{"extra.test"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}}},
			want: "nameserver 10.96.0.10\nsearch web.svc.cluster.local svc.cluster.local cluster.local extra.test\noptions ndots:1\n", useOwn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p"}, Spec: tc.spec}
			got, ok := cluster.ResolvConf(pod, ns)
			if ok != tc.useOwn || string(got) != tc.want {
				t.Errorf("ResolvConf = %q, %v; want %q, %v", got, ok, tc.want, tc.useOwn)
			}
		})
	}
}
