//go:build kernel

package takeover

import (
	"context"
	"fmt"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/planinput"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// The cluster both proxies serve.
const (
	ns        = "takeover"
	thisNode  = "n1"
	otherNode = "n2"
	// clusterCIDR is kubeadm's podSubnet, dual-stack.
	clusterCIDR = "10.244.0.0/16,fd00:10:244::/48"
	// streamPort is where each pod's echo backend keeps connections open.
	streamPort = 8081
	// controlPort is a port of pod-a that no Service targets: the control
	// requests' (see controlTargets). Controls to the backend port, which
	// the same client also reaches through ClusterIPs, had 3 of about 700
	// dials time out during one rollback: a direct connection to
	// pod-a:8080 and a proxied one to it from the same client port are one
	// connection to IPVS, which matches replies by client and real server
	// only, and the proxied one takes the direct one's replies (see
	// blameIPVSReplyMatch). A control must not share the proxied traffic's
	// tuples.
	controlPort = 8082
	// ordinary is how many plain ClusterIP services fill the table beside
	// the mix. kube-proxy's IPVS mode runs one `ipset add` process per set
	// entry in its first sync, seconds each under TCG, so 100 services
	// cost it most of its first sync (TestTakeover's report). Every must-hold of the takeover and the rollback is
	// about the mix; the ordinary services only make the table and the
	// sets more than one entry of each kind, which a handful does, and
	// keep `make test` within its budget.
	ordinary = 10
	// families is how many IP families kube-proxy syncs on the node.
	families = 2
	// Addresses the node serves beyond its own.
	externalIP  = "203.0.113.10"
	lbIP        = "203.0.113.20"
	lbLocalIP   = "203.0.113.21"
	lbAllowed   = "198.51.100.0/28" // the LAN client 198.51.100.11, not lan2 (.40)
	lan2Addr    = "198.51.100.40"
	otherNodeIP = "198.51.100.2"
)

// NodePorts, fixed so that the request loops know them before the API does.
const (
	npTCP, npUDP, npSCTP, npStream = 30080, 30081, 30082, 30083
	lbHTTP, lbStream               = 30090, 30091
	localHTTP, localHealth         = 30100, 30200
)

// cluster writes the objects through the admin client.
type cluster struct {
	t      *testing.T
	client kubernetes.Interface
}

func (c *cluster) ctx() context.Context { return context.Background() }

func (c *cluster) must(_ any, err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// ep is one endpoint of a slice.
type ep struct {
	addr        netip.Addr
	node        string
	terminating bool
}

func ready(node string, addrs ...netip.Addr) []ep {
	var out []ep
	for _, a := range addrs {
		out = append(out, ep{addr: a, node: node})
	}
	return out
}

// slice is the EndpointSlice NAME of service svc for one family with the
// service's named ports (name -> target port and protocol).
func slice(name, svc string, fam discoveryv1.AddressType, ports []corev1.ServicePort, eps []ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "takeover-e2e"}},
		AddressType: fam,
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(p.TargetPort.IntVal), Protocol: ptr.To(p.Protocol)})
	}
	for _, e := range eps {
		cond := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
		if e.terminating {
			cond = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.addr.String()}, NodeName: ptr.To(e.node), Conditions: cond})
	}
	return s
}

func port(name string, proto corev1.Protocol, p, target, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: p, TargetPort: intstr.FromInt32(target), NodePort: nodePort}
}

// pods are the node's real pods: a, b serve everything, c is terminating
// where it appears.
type pods struct{ a, b, c *ktest.Pod }

func v4(p *ktest.Pod) netip.Addr { return p.Addrs[0] }
func v6(p *ktest.Pod) netip.Addr { return p.Addrs[1] }

// fake is endpoint k of the ordinary services, on the other node.
func fake(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(100 + k/250), byte(k%250 + 1)})
}

// setup creates the nodes and the realistic mix of Services (see the
// package doc) with their EndpointSlices, and returns the Services by name.
func (c *cluster) setup(p pods) map[string]*corev1.Service {
	c.must(c.client.CoreV1().Namespaces().Create(c.ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	for name, addrs := range map[string][]string{
		thisNode:  {ktest.NodeIPv4.String(), ktest.NodeIPv6.String()},
		otherNode: {otherNodeIP},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		created, err := c.client.CoreV1().Nodes().Create(c.ctx(), n, metav1.CreateOptions{})
		c.must(created, err)
		created.Status = n.Status
		c.must(c.client.CoreV1().Nodes().UpdateStatus(c.ctx(), created, metav1.UpdateOptions{}))
	}

	http := port("http", corev1.ProtocolTCP, 80, ktest.BackendPort, 0)
	stream := port("stream", corev1.ProtocolTCP, 81, streamPort, 0)
	ab := ready(thisNode, v4(p.a), v4(p.b))
	type def struct {
		spec   corev1.ServiceSpec
		slices []*discoveryv1.EndpointSlice
		lbIP   string
	}
	withNP := func(sp corev1.ServicePort, np int32) corev1.ServicePort { sp.NodePort = np; return sp }
	defs := map[string]def{
		"web": {spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{http, stream}}},
		"np": {spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
			port("tcp", corev1.ProtocolTCP, 80, ktest.BackendPort, npTCP),
			port("udp", corev1.ProtocolUDP, 80, ktest.BackendPort, npUDP),
			port("sctp", corev1.ProtocolSCTP, 80, ktest.BackendPort, npSCTP),
			port("stream", corev1.ProtocolTCP, 81, streamPort, npStream)}}},
		"ext": {spec: corev1.ServiceSpec{ExternalIPs: []string{externalIP}, Ports: []corev1.ServicePort{http, stream}}},
		"lb": {spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerSourceRanges: []string{lbAllowed},
			Ports: []corev1.ServicePort{withNP(http, lbHTTP), withNP(stream, lbStream)}}, lbIP: lbIP},
		"local": {spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort: localHealth, Ports: []corev1.ServicePort{withNP(http, localHTTP)}}, lbIP: lbLocalIP,
			slices: []*discoveryv1.EndpointSlice{slice("local-1", "local", discoveryv1.AddressTypeIPv4, []corev1.ServicePort{http},
				append(ready(thisNode, v4(p.a)), ready(otherNode, netip.MustParseAddr("10.244.1.5"))...))}},
		"itp": {spec: corev1.ServiceSpec{InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal), Ports: []corev1.ServicePort{http}},
			slices: []*discoveryv1.EndpointSlice{slice("itp-1", "itp", discoveryv1.AddressTypeIPv4, []corev1.ServicePort{http},
				append(ready(thisNode, v4(p.b)), ready(otherNode, netip.MustParseAddr("10.244.1.6"))...))}},
		"sticky": {spec: corev1.ServiceSpec{SessionAffinity: corev1.ServiceAffinityClientIP, Ports: []corev1.ServicePort{http}}},
		"dual": {spec: corev1.ServiceSpec{IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack), Ports: []corev1.ServicePort{http}},
			slices: []*discoveryv1.EndpointSlice{
				slice("dual-4", "dual", discoveryv1.AddressTypeIPv4, []corev1.ServicePort{http}, ab),
				slice("dual-6", "dual", discoveryv1.AddressTypeIPv6, []corev1.ServicePort{http}, ready(thisNode, v6(p.a), v6(p.b)))}},
		"term": {spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{http}},
			slices: []*discoveryv1.EndpointSlice{slice("term-1", "term", discoveryv1.AddressTypeIPv4, []corev1.ServicePort{http},
				append(ready(thisNode, v4(p.a)), ep{addr: v4(p.c), node: thisNode, terminating: true}))}},
	}
	for i := range ordinary {
		name := fmt.Sprintf("s%03d", i)
		defs[name] = def{spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{http}},
			slices: []*discoveryv1.EndpointSlice{slice(name+"-1", name, discoveryv1.AddressTypeIPv4, []corev1.ServicePort{http},
				ready(otherNode, fake(2*i), fake(2*i+1)))}}
	}
	out := map[string]*corev1.Service{}
	for name, d := range defs {
		svc, err := c.client.CoreV1().Services(ns).Create(c.ctx(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: d.spec}, metav1.CreateOptions{})
		c.must(svc, err)
		if d.lbIP != "" {
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: d.lbIP, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
			svc, err = c.client.CoreV1().Services(ns).UpdateStatus(c.ctx(), svc, metav1.UpdateOptions{})
			c.must(svc, err)
		}
		slices := d.slices
		if slices == nil {
			slices = []*discoveryv1.EndpointSlice{slice(name+"-1", name, discoveryv1.AddressTypeIPv4, d.spec.Ports, ab)}
		}
		for _, s := range slices {
			c.must(c.client.DiscoveryV1().EndpointSlices(ns).Create(c.ctx(), s, metav1.CreateOptions{}))
		}
		out[name] = svc
	}
	return out
}

// dump writes every Service, EndpointSlice and Node as one List file for
// `ipvs-proxy plan -f`.
func (c *cluster) dump(path string) error {
	return planinput.Write(c.ctx(), c.client, path)
}
