package convert

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

func svc(name string, mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if mut != nil {
		mut(s)
	}
	return s
}

func refusalStrings(rs []model.Refusal) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s %s %s %s", r.Subject, r.Field, model.Word(r.Address), r.Reason))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestSkipped(t *testing.T) {
	for name, s := range map[string]*corev1.Service{
		"nil":      nil,
		"headless": svc("h", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
		"externalName": svc("e", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName, s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ServiceTypeExternalName, "example.com", "", nil
		}),
		"other proxy": svc("o", func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "cilium"} }),
	} {
		if SkipReason(s) == "" {
			t.Errorf("%s: not skipped", name)
		}
		ports, refusals := ServicePorts(s)
		if ports != nil || refusals != nil {
			t.Errorf("%s: ServicePorts = %v, %v; want nothing", name, ports, refusals)
		}
	}
	if r := SkipReason(svc("plain", nil)); r != "" {
		t.Errorf("plain service skipped: %s", r)
	}
}

func TestServicePorts(t *testing.T) {
	tests := []struct {
		name     string
		svc      *corev1.Service
		want     []model.ServicePort
		refusals []string
	}{
		{
			name: "zookeeper1: ClusterIP with three named ports",
			svc: svc("zookeeper1", func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.254.181.6", nil
				s.Spec.Ports = []corev1.ServicePort{{Name: "1", Port: 2181}, {Name: "2", Port: 2888, Protocol: "TCP"}, {Name: "3", Port: 3888}}
			}),
			want: []model.ServicePort{
				{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "zookeeper1"}, Port: "1"}, Protocol: model.TCP, Port: 2181, ClusterIPs: addrs("10.254.181.6")},
				{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "zookeeper1"}, Port: "2"}, Protocol: model.TCP, Port: 2888, ClusterIPs: addrs("10.254.181.6")},
				{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "zookeeper1"}, Port: "3"}, Protocol: model.TCP, Port: 3888, ClusterIPs: addrs("10.254.181.6")},
			},
		},
		{
			name: "NodePort, ClientIP affinity with the default timeout, scheduler annotations",
			svc: svc("wordpress-mysql", func(s *corev1.Service) {
				s.Annotations = map[string]string{AnnotationScheduler: " mh ", AnnotationSchedulerFlags: " mh-port "}
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.Ports = []corev1.ServicePort{{Port: 3306, NodePort: 30010, Protocol: "TCP"}}
			}),
			want: []model.ServicePort{{
				Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "wordpress-mysql"}}, Protocol: model.TCP, Port: 3306, NodePort: 30010,
				ClusterIPs: addrs("10.96.0.10"), AffinityTimeout: 10800, Scheduler: "mh", SchedulerFlags: "mh-port",
			}},
		},
		{
			name: "LoadBalancer: dual-stack, Local, health check, ipMode Proxy and hostname ingress skipped, source ranges",
			svc: svc("lb", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
				s.Spec.ExternalIPs = []string{"192.0.2.1", "192.0.2.1", "2001:db8::1"}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				s.Spec.HealthCheckNodePort = 32000
				s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.7/24", " 198.51.100.0/24"}
				s.Spec.TrafficDistribution = ptr.To("PreferSameZone")
				s.Spec.Ports = []corev1.ServicePort{{Name: "sctp", Port: 9000, NodePort: 31000, Protocol: "SCTP"}}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
					{IP: "198.51.100.10"},
					{IP: "198.51.100.11", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
					{IP: "198.51.100.12", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
					{Hostname: "lb.example.com"},
				}
			}),
			want: []model.ServicePort{{
				Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "lb"}, Port: "sctp"}, Protocol: model.SCTP, Port: 9000, NodePort: 31000,
				ClusterIPs: addrs("10.96.0.10", "fd00::10"), ExternalIPs: addrs("192.0.2.1", "2001:db8::1"),
				LoadBalancerIPs:          addrs("198.51.100.10", "198.51.100.12"),
				LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.0/24")}, LoadBalancerFirewall: true,
				ExternalPolicyLocal: true, InternalPolicyLocal: true, HealthCheckNodePort: 32000,
				TrafficDistribution: "PreferSameZone",
			}},
		},
		{
			name: "hostile and junk fields are refused one by one, the rest is kept",
			svc: svc("junk", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.ClusterIPs = []string{"10.96.0.10", "10.96.0.11", "fe80::1%eth0"}
				s.Spec.ExternalIPs = []string{"192.0.2.1", "300.1.1.1", "", "::ffff:192.0.2.9"}
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86401)}}
				s.Spec.ExternalTrafficPolicy = "Nearby"
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "a", Port: 80, NodePort: 70000},
					{Name: "b", Port: 0},
					{Name: "c", Port: 81, Protocol: "ICMP"},
					{Name: "a", Port: 82},
					{Name: "d", Port: 65535, Protocol: "UDP", NodePort: 30001},
				}
			}),
			want: []model.ServicePort{
				{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "junk"}, Port: "a"}, Protocol: model.TCP, Port: 80,
					ClusterIPs: addrs("10.96.0.10"), ExternalIPs: addrs("192.0.2.1", "::ffff:192.0.2.9"), AffinityTimeout: 10800},
				{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "junk"}, Port: "d"}, Protocol: model.UDP, Port: 65535, NodePort: 30001,
					ClusterIPs: addrs("10.96.0.10"), ExternalIPs: addrs("192.0.2.1", "::ffff:192.0.2.9"), AffinityTimeout: 10800},
			},
			refusals: []string{
				`default/junk spec.clusterIPs 10.96.0.11 InvalidField`,
				`default/junk spec.clusterIPs fe80::1%eth0 InvalidAddress`,
				`default/junk spec.externalIPs 300.1.1.1 InvalidAddress`,
				`default/junk spec.externalIPs "" InvalidAddress`,
				`default/junk spec.externalTrafficPolicy Nearby InvalidField`,
				`default/junk spec.sessionAffinityConfig.clientIP.timeoutSeconds 86401 InvalidField`,
				`default/junk spec.ports[0].nodePort 70000 InvalidPort`,
				`default/junk spec.ports[1].port 0 InvalidPort`,
				`default/junk spec.ports[2].protocol ICMP InvalidProtocol`,
				`default/junk spec.ports[3].name a InvalidField`,
			},
		},
		{
			name:     "no usable cluster IP: service refused as a whole",
			svc:      svc("bad", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.300", nil }),
			refusals: []string{`default/bad spec.clusterIP 10.96.0.300 InvalidAddress`},
		},
		{
			name: "two bad cluster IPs",
			svc:  svc("bad2", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"x", "y"} }),
			refusals: []string{
				`default/bad2 spec.clusterIPs x InvalidAddress`,
				`default/bad2 spec.clusterIPs y InvalidAddress`,
				`default/bad2 spec.clusterIPs x,y InvalidAddress`,
			},
		},
		{
			name:     "no cluster IP allocated",
			svc:      svc("fresh", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
			refusals: []string{`default/fresh spec.clusterIP "" InvalidField`},
		},
		{
			name: "LoadBalancer whose only source range is junk is served closed, never opened to everyone",
			svc: svc("closed", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/33"}
				s.Spec.Ports[0].NodePort = 30080
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}, {IP: "not-an-ip"}}
			}),
			want: []model.ServicePort{{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "closed"}, Port: "http"}, Protocol: model.TCP, Port: 80, NodePort: 30080,
				ClusterIPs: addrs("10.96.0.10"), LoadBalancerIPs: addrs("198.51.100.10"), LoadBalancerFirewall: true}},
			refusals: []string{
				`default/closed status.loadBalancer.ingress not-an-ip InvalidAddress`,
				`default/closed spec.loadBalancerSourceRanges 10.0.0.0/33 InvalidSourceRange`,
				`default/closed spec.loadBalancerSourceRanges 198.51.100.10 InvalidSourceRange`,
			},
		},
		{
			name: "only IPv6 source ranges for an IPv4 LoadBalancer IP: served closed, refused by name",
			svc: svc("v6only", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{"2001:db8::/32"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}, {IP: "2001:db8:1::10"}}
			}),
			want: []model.ServicePort{{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "v6only"}, Port: "http"}, Protocol: model.TCP, Port: 80,
				ClusterIPs: addrs("10.96.0.10"), LoadBalancerIPs: addrs("198.51.100.10", "2001:db8:1::10"),
				LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}, LoadBalancerFirewall: true}},
			refusals: []string{`default/v6only spec.loadBalancerSourceRanges 198.51.100.10 InvalidSourceRange`},
		},
		{
			name: "an IPv4-mapped source range is read as the IPv4 range it maps, and says so",
			svc: svc("mapped", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{"::ffff:192.0.2.0/120", "::ffff:0:0/90"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
			}),
			want: []model.ServicePort{{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "mapped"}, Port: "http"}, Protocol: model.TCP, Port: 80,
				ClusterIPs: addrs("10.96.0.10"), LoadBalancerIPs: addrs("198.51.100.10"),
				LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("::ffc0:0:0/90")}, LoadBalancerFirewall: true}},
			refusals: []string{`default/mapped spec.loadBalancerSourceRanges ::ffff:192.0.2.0/120 IPv4MappedIPv6`},
		},
		{
			name: "the legacy annotation with only IPv6 ranges closes an IPv4 LoadBalancer IP too",
			svc: svc("ann6", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnotationSourceRanges: "fd00::/8"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
			}),
			want: []model.ServicePort{{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "ann6"}, Port: "http"}, Protocol: model.TCP, Port: 80,
				ClusterIPs: addrs("10.96.0.10"), LoadBalancerIPs: addrs("198.51.100.10"),
				LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("fd00::/8")}, LoadBalancerFirewall: true}},
			refusals: []string{`default/ann6 metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges] 198.51.100.10 InvalidSourceRange`},
		},
		{
			name: "source ranges from the legacy annotation; nodePort on a ClusterIP service ignored",
			svc: svc("ann", func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Annotations = map[string]string{AnnotationSourceRanges: "10.0.0.0/8, bogus"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
			}),
			want: []model.ServicePort{{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "ann"}, Port: "http"}, Protocol: model.TCP, Port: 80,
				ClusterIPs: addrs("10.96.0.10"), LoadBalancerIPs: addrs("198.51.100.10"),
				LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, LoadBalancerFirewall: true}},
			refusals: []string{`default/ann metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges] bogus InvalidSourceRange`},
		},
		{
			name: "nodePort on a ClusterIP service, Local policy on a purely internal service",
			svc: svc("internal", func(s *corev1.Service) {
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.SessionAffinity = "Sticky"
			}),
			want: []model.ServicePort{{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "internal"}, Port: "http"}, Protocol: model.TCP, Port: 80,
				ClusterIPs: addrs("10.96.0.10")}},
			refusals: []string{
				`default/internal spec.sessionAffinity Sticky InvalidField`,
				`default/internal spec.ports[0].nodePort 30080 InvalidField`,
			},
		},
		{
			// Upstream's "IPv4 Service Type ClusterIP with leading zeros
			// should work interpreted as decimal": the v1.34.4 API server
			// takes 10.96.0.011 and allocates 10.96.0.11.
			name: "leading-zero octets read as decimal, as the API server and kube-proxy read them",
			svc: svc("zeros", func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.011", []string{"10.96.0.011"}
				s.Spec.ExternalIPs = []string{"198.051.100.007", " 198.51.100.8", "198.51.100.9%eth0"}
			}),
			want: []model.ServicePort{{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "zeros"}, Port: "http"}, Protocol: model.TCP, Port: 80,
				ClusterIPs: addrs("10.96.0.11"), ExternalIPs: addrs("198.51.100.7")}},
			refusals: []string{
				`default/zeros spec.externalIPs "\x20198.51.100.8" InvalidAddress`,
				`default/zeros spec.externalIPs 198.51.100.9%eth0 InvalidAddress`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, refusals := ServicePorts(tt.svc)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ports:\n got %+v\nwant %+v", got, tt.want)
			}
			if g, w := strings.Join(refusalStrings(refusals), "\n"), strings.Join(tt.refusals, "\n"); g != w {
				t.Errorf("refusals:\n got %s\nwant %s", g, w)
			}
			for _, r := range refusals {
				if r.Message == "" || r.Subject.String() != "default/"+tt.svc.Name {
					t.Errorf("refusal without message or service: %+v", r)
				}
			}
		})
	}
}

func TestServicePortsCopies(t *testing.T) {
	ports, _ := ServicePorts(svc("two", func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "a", Port: 1}, {Name: "b", Port: 2}}
	}))
	ports[0].ClusterIPs[0] = netip.MustParseAddr("1.1.1.1")
	if ports[1].ClusterIPs[0] != netip.MustParseAddr("10.96.0.10") {
		t.Fatal("ports share their ClusterIPs slice")
	}
}

func slice(name, service string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{LabelServiceName: service}},
		AddressType: at,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func ep(addr string, mut func(*discoveryv1.Endpoint)) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}}
	if mut != nil {
		mut(&e)
	}
	return e
}

func TestEndpoints(t *testing.T) {
	web := svc("web", func(s *corev1.Service) {
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
		s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: "UDP"}}
	})
	slices := []*discoveryv1.EndpointSlice{
		// Second by name, so its duplicate of 10.0.0.1:8080 loses.
		slice("web-b", "web", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			ep("10.0.0.1", func(e *discoveryv1.Endpoint) { e.NodeName = ptr.To("dup") }),
			ep("10.0.0.3", func(e *discoveryv1.Endpoint) {
				e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
			}),
		),
		slice("web-a", "web", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{
				{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
				{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(corev1.ProtocolUDP)},
				{Name: ptr.To("dns"), Port: ptr.To[int32](5354), Protocol: ptr.To(corev1.ProtocolTCP)}, // protocol mismatch
				{Name: ptr.To("gone"), Port: ptr.To[int32](1)},                                         // no such service port
				{Name: ptr.To("x"), Port: nil},
				{Name: ptr.To("y"), Port: ptr.To[int32](0)},
			},
			ep("10.0.0.2", func(e *discoveryv1.Endpoint) {
				e.NodeName, e.Zone = ptr.To("n2"), ptr.To("z2")
				e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z2"}}, ForNodes: []discoveryv1.ForNode{{Name: "n2"}}}
			}),
			ep("10.0.0.1", func(e *discoveryv1.Endpoint) {
				e.NodeName = ptr.To("n1")
				e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false)}
			}),
			ep("127.0.0.1", nil),
			ep("169.254.169.254", nil),
			ep("fd00::1", nil),
			ep("bogus", nil),
			ep("10.0.0.1 ", nil),
			discoveryv1.Endpoint{},
		),
		slice("web-v6", "web", discoveryv1.AddressTypeIPv6,
			[]discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			ep("fd00::2", nil), ep("::ffff:10.0.0.9", nil)),
		slice("web-fqdn", "web", discoveryv1.AddressTypeFQDN,
			[]discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}, ep("example.com", nil)),
		slice("other", "other", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}, ep("10.9.9.9", nil)),
		nil,
	}
	c := Convert([]*corev1.Service{web}, slices, nil)

	http := model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}, Port: "http"}
	dns := model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}, Port: "dns"}
	want := map[model.ServicePortName][]model.Endpoint{
		http: {
			{Address: netip.MustParseAddr("10.0.0.1"), Port: 8080, NodeName: "n1", Ready: false, Serving: false},
			{Address: netip.MustParseAddr("10.0.0.2"), Port: 8080, NodeName: "n2", Zone: "z2", Ready: true, Serving: true, ZoneHints: []string{"z2"}, NodeHints: []string{"n2"}},
			{Address: netip.MustParseAddr("10.0.0.3"), Port: 8080, Ready: false, Serving: true, Terminating: true},
			{Address: netip.MustParseAddr("fd00::2"), Port: 8080, Ready: true, Serving: true},
		},
		dns: {
			{Address: netip.MustParseAddr("10.0.0.1"), Port: 5353, NodeName: "n1"},
			{Address: netip.MustParseAddr("10.0.0.2"), Port: 5353, NodeName: "n2", Zone: "z2", Ready: true, Serving: true, ZoneHints: []string{"z2"}, NodeHints: []string{"n2"}},
		},
	}
	if !reflect.DeepEqual(c.Endpoints, want) {
		t.Errorf("endpoints:\n got %+v\nwant %+v", c.Endpoints, want)
	}
	wantRefusals := []string{
		`default/web endpointSlice[web-a].endpoints[2].addresses[0] 127.0.0.1 Loopback`,
		`default/web endpointSlice[web-a].endpoints[3].addresses[0] 169.254.169.254 LinkLocal`,
		`default/web endpointSlice[web-a].endpoints[4].addresses[0] fd00::1 UnsupportedFamily`,
		`default/web endpointSlice[web-a].endpoints[5].addresses[0] bogus InvalidAddress`,
		`default/web endpointSlice[web-a].endpoints[6].addresses[0] "10.0.0.1\x20" InvalidAddress`,
		`default/web endpointSlice[web-a].endpoints[7].addresses "" InvalidEndpoint`,
		`default/web endpointSlice[web-a].ports[4].port "" InvalidPort`,
		`default/web endpointSlice[web-a].ports[5].port 0 InvalidPort`,
		`default/web endpointSlice[web-v6].endpoints[1].addresses[0] ::ffff:10.0.0.9 IPv4MappedIPv6`,
	}
	if g, w := strings.Join(refusalStrings(c.Refusals), "\n"), strings.Join(wantRefusals, "\n"); g != w {
		t.Errorf("refusals:\n got %s\nwant %s", g, w)
	}
}

func TestEndpointsFamilies(t *testing.T) {
	v4only := svc("v4", nil)
	c := Convert([]*corev1.Service{v4only}, []*discoveryv1.EndpointSlice{
		slice("v4-6", "v4", discoveryv1.AddressTypeIPv6,
			[]discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}}, ep("fd00::1", nil)),
	}, nil)
	if len(c.Endpoints) != 0 || len(c.Refusals) != 0 {
		t.Errorf("IPv6 slice of an IPv4 service used: %+v %+v", c.Endpoints, c.Refusals)
	}
}

func TestNodeFromObject(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelTopologyZone: "z1"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.211"},
			{Type: corev1.NodeHostName, Address: "n1"},
			{Type: corev1.NodeExternalIP, Address: "2001:db8::211"},
			{Type: corev1.NodeInternalIP, Address: "10.0.0.211"},
			{Type: corev1.NodeExternalIP, Address: "garbage"},
			{Type: corev1.NodeInternalDNS, Address: "n1.internal"},
		}},
	}
	got, refusals := NodeFromObject(n)
	want := model.Node{Name: "n1", Addresses: addrs("10.0.0.211", "2001:db8::211"), PrimaryIPs: addrs("10.0.0.211", "2001:db8::211"),
		Labels: map[string]string{corev1.LabelTopologyZone: "z1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if g := strings.Join(refusalStrings(refusals), "\n"); g != `Node/n1 status.addresses[4] garbage InvalidAddress` {
		t.Errorf("refusals: %s", g)
	}
	n.Labels["x"] = "y"
	if _, ok := got.Labels["x"]; ok {
		t.Error("labels alias the Node object")
	}
}

// TestNodeAddressesLenient: every address in status.addresses that reads
// as an IP protects, whatever its type and however it is written (issue
// 14, item 3: these were skipped, or refused and left unprotected); an
// odd form is refused naming it, and protected all the same.
func TestNodeAddressesLenient(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "::ffff:10.10.0.213"},
		{Type: corev1.NodeInternalIP, Address: " 10.10.0.214"},
		{Type: corev1.NodeExternalIP, Address: "10.10.0.215%eth0"},
		{Type: corev1.NodeExternalIP, Address: "010.010.000.216"},
		{Type: corev1.NodeHostName, Address: "10.10.0.217"},
		{Type: corev1.NodeInternalDNS, Address: "10.10.0.218"},
		{Type: corev1.NodeExternalDNS, Address: "fd10::219"},
		{Type: corev1.NodeHostName, Address: "n3.example"},
		{Type: "Bogus", Address: "10.10.0.220"},
		{Type: corev1.NodeInternalIP, Address: "fe80::1%eth0"},
	}}}
	got, refusals := NodeFromObject(n)
	want := addrs("10.10.0.213", "10.10.0.214", "10.10.0.215", "10.10.0.216", "10.10.0.217", "10.10.0.218", "fd10::219", "10.10.0.220", "fe80::1")
	if !reflect.DeepEqual(got.Addresses, want) {
		t.Errorf("addresses %v\nwant      %v", got.Addresses, want)
	}
	var lines []string
	for _, r := range refusals {
		lines = append(lines, r.String())
	}
	wantRefusals := []string{
		`Node/n3 status.addresses[0] ::ffff:10.10.0.213 InvalidAddress: not an IP address in canonical form; protected as node address 10.10.0.213 all the same`,
		`Node/n3 status.addresses[1] "\x2010.10.0.214" InvalidAddress: not an IP address in canonical form; protected as node address 10.10.0.214 all the same`,
		`Node/n3 status.addresses[2] 10.10.0.215%eth0 InvalidAddress: not an IP address in canonical form; protected as node address 10.10.0.215 all the same`,
		`Node/n3 status.addresses[3] 010.010.000.216 InvalidAddress: not an IP address in canonical form; protected as node address 10.10.0.216 all the same`,
		`Node/n3 status.addresses[9] fe80::1%eth0 InvalidAddress: not an IP address in canonical form; protected as node address fe80::1 all the same`,
	}
	if !reflect.DeepEqual(lines, wantRefusals) {
		t.Errorf("refusals:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(wantRefusals, "\n"))
	}
}

func TestConvertIsolatesAndSorts(t *testing.T) {
	good := svc("b-good", nil)
	bad := svc("a-bad", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "junk", nil })
	other := svc("c", func(s *corev1.Service) { s.Namespace = "aaa" })
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}, nil, {ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	c1 := Convert([]*corev1.Service{good, bad, nil, other}, nil, nodes)
	c2 := Convert([]*corev1.Service{other, nil, bad, good}, nil, []*corev1.Node{nodes[2], nodes[0]})
	if !reflect.DeepEqual(c1, c2) {
		t.Errorf("order-dependent:\n%+v\n%+v", c1, c2)
	}
	var names []string
	for _, p := range c1.Services {
		names = append(names, p.Name.String())
	}
	if g := strings.Join(names, " "); g != "aaa/c:http default/b-good:http" {
		t.Errorf("services %s", g)
	}
	if len(c1.Nodes) != 2 || c1.Nodes[0].Name != "n1" {
		t.Errorf("nodes %+v", c1.Nodes)
	}
	if len(c1.Refusals) == 0 || c1.Refusals[0].Subject.String() != "default/a-bad" {
		t.Errorf("refusals %+v", c1.Refusals)
	}
}

// TestPrimaryIPs: kube-proxy's node IPs (GetNodeHostIPs): InternalIPs before
// ExternalIPs, the first, then the first of the other family.
func TestPrimaryIPs(t *testing.T) {
	in, ex := corev1.NodeInternalIP, corev1.NodeExternalIP
	for _, tc := range []struct {
		as   []corev1.NodeAddress
		want []netip.Addr
	}{
		{[]corev1.NodeAddress{{Type: ex, Address: "203.0.113.5"}, {Type: in, Address: "10.0.0.5"}, {Type: in, Address: "10.0.0.6"}}, addrs("10.0.0.5")},
		{[]corev1.NodeAddress{{Type: in, Address: "fd00::5"}, {Type: in, Address: "10.0.0.5"}, {Type: in, Address: "10.0.0.6"}}, addrs("fd00::5", "10.0.0.5")},
		{[]corev1.NodeAddress{{Type: ex, Address: "203.0.113.5"}, {Type: corev1.NodeHostName, Address: "n"}}, addrs("203.0.113.5")},
		{[]corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "n"}}, nil},
	} {
		if got := primaryIPs(tc.as); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("primaryIPs(%v) = %v, want %v", tc.as, got, tc.want)
		}
	}
}
