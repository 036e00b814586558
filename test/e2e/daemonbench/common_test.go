package daemonbench

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// The content both halves agree on.
const (
	benchNS  = "bench"
	thisNode = "n1"
	// otherNodes hold every endpoint but the real pods'.
	otherNodes = 10
	// realPods are the pods in the VM: 10.244.0.1 to 10.244.0.realPods.
	realPods    = 4
	servicePort = 80
	// poolSize is the number of distinct pod IPs endpoints are drawn from.
	poolSize = 20000
	// triggerAnnotation is endpoints.kubernetes.io/last-change-trigger-time.
	triggerAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"
)

// envInt reads a positive integer from the environment, def when unset.
func envInt(t testing.TB, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

func envDuration(t testing.TB, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", key, v)
	}
	return d
}

func serviceName(i int) string { return fmt.Sprintf("s%05d", i) }

func sliceName(i int) string { return serviceName(i) + "-1" }

// podIP is pod x of the pool: 10.244.0.1 upwards, 250 per /24. The first
// realPods are the real pods on this node.
func podIP(x int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(x / 250), byte(x%250 + 1)})
}

func podNode(x int) string {
	if x < realPods {
		return thisNode
	}
	return fmt.Sprintf("n%d", 2+x%otherNodes)
}

// nodeIP is the InternalIP of node n1..n(1+otherNodes); n1 is the ktest
// node's own address.
func nodeIP(n int) netip.Addr {
	if n == 1 {
		return ktest.NodeIPv4
	}
	return netip.AddrFrom4([4]byte{198, 51, 100, byte(n)})
}

// changeIP is the new address of change k: outside the pool.
func changeIP(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(128 + k/250), byte(k%250 + 1)})
}

// changedService is the service whose slice change k edits, spread over
// the services.
func changedService(k, services int) int { return (k * 7919) % services }

func benchService(i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: serviceName(i)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "", Port: servicePort, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromInt32(ktest.BackendPort)}}},
	}
}

// benchSlice is service i's EndpointSlice: endpoints pool addresses
// i*endpoints .. i*endpoints+endpoints-1 (mod the pool).
func benchSlice(i, endpoints int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: sliceName(i),
			Labels: map[string]string{discoveryv1.LabelServiceName: serviceName(i), discoveryv1.LabelManagedBy: "e2e-daemonbench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(int32(ktest.BackendPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for j := 0; j < endpoints; j++ {
		x := (i*endpoints + j) % poolSize
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{podIP(x).String()}, NodeName: ptr.To(podNode(x)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}})
	}
	return s
}
