package main

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The demo cluster: the seed articles' Services with the demo's addresses.
// Cluster IPs are the seeds' 10.254.x.y moved into the test API server's
// 10.96.0.0/16; pods are 10.244.1.x on node-a.
const (
	nodeA     = "node-a"
	nodeB     = "node-b"
	nodeAIP   = "198.51.100.1" // ktest.NodeIPv4: node-a's eth0
	nodeBIP   = "198.51.100.2" // node-b, another node on the same LAN
	clientIP  = "198.51.100.11"
	freeExtIP = "203.0.113.10" // an externalIP no node has
	podCIDR   = "10.244.0.0/16"
	kubelet   = 10250 // the port node-b listens on, as a kubelet would

	mysqlVIP = "10.96.67.85"
	zkVIP    = "10.96.181.6"
	stickVIP = "10.96.40.7"
	nginxVIP = "10.96.100.80"
)

// backend is one pod of the demo: its name, address and the ports it serves.
type backend struct {
	name, addr string
	ports      []int
}

var backends = []backend{
	{"mysql-0", "10.244.1.2", []int{3306}},
	{"mysql-1", "10.244.1.3", []int{3306}},
	{"zookeeper1-0", "10.244.1.4", []int{2181, 2888, 3888}},
	{"sticky-web-0", "10.244.1.5", nil},
	{"sticky-web-1", "10.244.1.6", nil},
	{"nginx-0", "10.244.1.7", nil},
	{"nginx-1", "10.244.1.8", nil},
}

// Every ktest pod also serves TCP, UDP and SCTP on ktest.BackendPort (8080).
const backendPort = 8080

const clientPodIP = "10.244.1.100"

func tcpPort(name string, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(target)}
}

func node(name, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip},
			{Type: corev1.NodeHostName, Address: name},
		}},
	}
}

// sliceFor is the EndpointSlice the EndpointSlice controller would write for
// svc with the given backends on node-a, all ready.
func sliceFor(svc *corev1.Service, names ...string) *discoveryv1.EndpointSlice {
	var ports []discoveryv1.EndpointPort
	for _, p := range svc.Spec.Ports {
		ports = append(ports, discoveryv1.EndpointPort{
			Name: ptr(p.Name), Protocol: ptr(p.Protocol), Port: ptr(p.TargetPort.IntVal),
		})
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: svc.Name + "-demo",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
	}
	for _, n := range names {
		b := backendByName(n)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{b.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			NodeName:   ptr(nodeA),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: b.name},
		})
	}
	return s
}

func backendByName(name string) backend {
	for _, b := range backends {
		if b.name == name {
			return b
		}
	}
	panic("no backend " + name)
}

func ptr[T any](v T) *T { return &v }

// scenario is one seed's Service with its endpoints.
type scenario struct {
	seed  string
	svc   *corev1.Service
	slice *discoveryv1.EndpointSlice
}

func scenarios() []scenario {
	mysql := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "wordpress-mysql"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, ClusterIP: mysqlVIP,
			Selector: map[string]string{"name": "wordpress-mysql"},
			Ports:    []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 3306, TargetPort: intstr.FromInt32(3306), NodePort: 30010}},
		},
	}
	zk := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "zookeeper1"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: zkVIP,
			Selector: map[string]string{"name": "zookeeper1"},
			Ports:    []corev1.ServicePort{tcpPort("1", 2181, 2181), tcpPort("2", 2888, 2888), tcpPort("3", 3888, 3888)},
		},
	}
	sticky := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "sticky-web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: stickVIP,
			Selector:        map[string]string{"app": "sticky-web"},
			Ports:           []corev1.ServicePort{tcpPort("http", 80, backendPort)},
			SessionAffinity: corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{
				ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(600))},
			},
		},
	}
	// The seed: nginx-service patched with externalIPs set to a node's own
	// address. Here it also has an address no node has, which is served
	// normally.
	nginx := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nginx-service"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: nginxVIP,
			Selector:    map[string]string{"app": "zgz"},
			Ports:       []corev1.ServicePort{{Name: "name-of-service-port", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(backendPort)}},
			ExternalIPs: []string{nodeAIP, freeExtIP},
		},
	}
	// The incident: another node's address as externalIP. kube-proxy's IPVS
	// mode binds it on kube-ipvs0 of every node and cuts them off from node-b.
	other := nginx.DeepCopy()
	other.Name = "nginx-other"
	other.Spec.ClusterIP = ""
	other.Spec.ExternalIPs = []string{nodeBIP}
	return []scenario{
		{"seed 000: NodePort wordpress-mysql, nodePort 30010, two endpoints", mysql, sliceFor(mysql, "mysql-0", "mysql-1")},
		{"seed 000: ClusterIP zookeeper1, three ports", zk, sliceFor(zk, "zookeeper1-0")},
		{"sessionAffinity: ClientIP (timeout 600s)", sticky, sliceFor(sticky, "sticky-web-0", "sticky-web-1")},
		{"seed: nginx-service, externalIP = node-a's own address", nginx, sliceFor(nginx, "nginx-0", "nginx-1")},
		{"incident: nginx-other, externalIP = node-b's address", other, sliceFor(other, "nginx-0", "nginx-1")},
	}
}

// describe is one kubectl-get-like line for a scenario.
func describe(s scenario) string {
	var ports []string
	for _, p := range s.svc.Spec.Ports {
		if p.NodePort != 0 {
			ports = append(ports, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
		} else {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
	}
	var eps []string
	for _, e := range s.slice.Endpoints {
		eps = append(eps, e.TargetRef.Name+"="+e.Addresses[0])
	}
	ext := "<none>"
	if len(s.svc.Spec.ExternalIPs) > 0 {
		ext = strings.Join(s.svc.Spec.ExternalIPs, ",")
	}
	aff := ""
	if s.svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		aff = "  affinity=ClientIP"
	}
	return fmt.Sprintf("%s/%s  %s  %s  external=%s  %s%s\n      endpoints: %s",
		s.svc.Namespace, s.svc.Name, s.svc.Spec.Type, s.svc.Spec.ClusterIP, ext,
		strings.Join(ports, ","), aff, strings.Join(eps, " "))
}
