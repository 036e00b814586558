//go:build kernel

package cluster_test

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// laterTests are the re-created tests added after the first batch, in
// their own files: conformance_kernel_test.go, terminating_kernel_test.go,
// conntrack_kernel_test.go,
// services_more_kernel_test.go, lb_kernel_test.go,
// lbchange_kernel_test.go, checklist_rest_kernel_test.go, endpoints_more_kernel_test.go,
// topology_kernel_test.go, disruptive_kernel_test.go (and
// granular_more_kernel_test.go, from granularChecks).
func (b *bed) laterTests(t *testing.T) {
	b.conformanceTests(t)
	b.terminatingTests(t)
	b.conntrackTests(t)
	b.servicesMore(t)
	b.lbTests(t)
	b.lbChangeTests(t)
	b.restTests(t)
	b.endpointTests(t)
	b.topologyTests(t)   // it labels the nodes with zones
	b.disruptiveTests(t) // last: they restart and rewrite the proxies
}

// conformanceTests are the checklist's [Conformance] tests (service.go
// and endpointslice.go) re-created on the bed, each a subtest named after
// its `It`. H6 (jig.CheckServiceReachability) is kept without its DNS leg
// (the bed has no cluster DNS) and made stronger where cheap: every
// endpoint must answer, not just one.
func (b *bed) conformanceTests(t *testing.T) {
	t.Run("should serve a basic endpoint from pods", b.serveBasicEndpoint)
	t.Run("should serve multiport endpoints from pods", b.serveMultiport)
	t.Run("should support a Service with multiple ports specified in multiple EndpointSlices", b.multiPortSlices)
	t.Run("should support a Service with multiple endpoint IPs specified in multiple EndpointSlices", b.multiIPSlices)
	t.Run("should be able to create a functioning NodePort service", b.functioningNodePort)
	t.Run("should serve endpoints on same port and different protocols", b.samePortProtocols)
	t.Run("should be able to change the type from ExternalName to ClusterIP", b.externalNameToClusterIP)
	t.Run("should be able to change the type from ExternalName to NodePort", b.externalNameToNodePort)
	t.Run("should be able to change the type from ClusterIP to ExternalName", b.clusterIPToExternalName)
	t.Run("should be able to change the type from NodePort to ExternalName", b.nodePortToExternalName)
	b.affinityTests(t)
}

// execPod is the upstream tests' exec pod: a pause pod on node.
func (b *bed) execPod(t *testing.T, ns, node string) pod {
	t.Helper()
	return b.runPod(t, ns, podSpec{name: "execpod-" + node, node: node})
}

// serveBasicEndpoint is SN-11: a Service 80->80 without pods; pod1 added:
// the VIP reaches it; pod2 added: both; pod1 deleted: only pod2.
func (b *bed) serveBasicEndpoint(t *testing.T) {
	ns := b.testNamespace(t, "endpoint-test2")
	sel := map[string]string{"app": "endpoint-test2"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "endpoint-test2"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{tcpPort("", 80, intstr.FromInt(80))}}})
	exec := b.execPod(t, ns, "node-c")
	b.runPod(t, ns, netserver("pod1", "node-a", sel, 80, 0))
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 80), "pod1")
	b.runPod(t, ns, netserver("pod2", "node-b", sel, 80, 0))
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), []string{"pod1", "pod2"})
	b.deletePodNow(t, ns, "pod1")
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 80), "pod2")
}

// serveMultiport is SN-12: ports 80 -> named svc1 and 81 -> named svc2;
// pod1 declares svc1=100, pod2 svc2=101: VIP:80 reaches pod1 only,
// VIP:81 pod2 only.
func (b *bed) serveMultiport(t *testing.T) {
	ns := b.testNamespace(t, "multi-endpoint-test")
	sel := map[string]string{"app": "multi-endpoint-test"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "multi-endpoint-test"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{
			tcpPort("portname1", 80, intstr.FromString("svc1")), tcpPort("portname2", 81, intstr.FromString("svc2"))}}})
	exec := b.execPod(t, ns, "node-c")
	p1 := netserver("pod1", "node-a", sel, 100, 0)
	p1.ports = []corev1.ContainerPort{{Name: "svc1", ContainerPort: 100}}
	p2 := netserver("pod2", "node-b", sel, 101, 0)
	p2.ports = []corev1.ContainerPort{{Name: "svc2", ContainerPort: 101}}
	b.runPod(t, ns, p1)
	b.runPod(t, ns, p2)
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 80), "pod1")
	answeredOnlyBy(t, "execpod", exec.ns, vip(svc, 81), "pod2")
}

// multiPortSlices is SN-22: a selector-less Service (port80 80, port81
// 81), one pod with two netexec containers on 8090 and 9090, and two
// custom EndpointSlices {port80 -> 8090}, {port81 -> 9090} of the same IP.
func (b *bed) multiPortSlices(t *testing.T) {
	ns := b.testNamespace(t, "endpointslice-ports")
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "example-custom-endpoints"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			tcpPort("port80", 80, intstr.FromInt(8090)), tcpPort("port81", 81, intstr.FromInt(9090))}}})
	p := b.runPodObject(t, ns, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-handle-http-request"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{
			{Name: "container-handle-8090-request", Image: agnhost, Args: []string{"netexec", "--http-port=8090"}},
			{Name: "container-handle-9090-request", Image: agnhost, Args: []string{"netexec", "--http-port=9090"}},
		}}})
	b.customSlice(t, ns, "e2e-custom-slice-80", svc.Name,
		discoveryv1.EndpointPort{Name: ptr.To("port80"), Port: ptr.To(int32(8090)), Protocol: ptr.To(corev1.ProtocolTCP)}, p.ip)
	b.customSlice(t, ns, "e2e-custom-slice-81", svc.Name,
		discoveryv1.EndpointPort{Name: ptr.To("port81"), Port: ptr.To(int32(9090)), Protocol: ptr.To(corev1.ProtocolTCP)}, p.ip)
	client := b.execPod(t, ns, "node-b")
	answeredOnlyBy(t, "client", client.ns, vip(svc, 80), p.name)
	answeredOnlyBy(t, "client", client.ns, vip(svc, 81), p.name)
}

// multiIPSlices is SN-23: two pods on 8090; slice1 {pod1, port80 -> 8090},
// slice2 {pod2, port81 -> 8090}: VIP:80 is pod1 only, VIP:81 pod2 only (a
// merge across port names answers with the other pod).
func (b *bed) multiIPSlices(t *testing.T) {
	ns := b.testNamespace(t, "endpointslice-ips")
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "example-custom-endpoints"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			tcpPort("port80", 80, intstr.FromInt(8090)), tcpPort("port81", 81, intstr.FromInt(8090))}}})
	p1 := b.runPod(t, ns, netserver("pod-handle-http-request-1", "node-a", nil, 8090, 0))
	p2 := b.runPod(t, ns, netserver("pod-handle-http-request-2", "node-b", nil, 8090, 0))
	b.customSlice(t, ns, "e2e-custom-slice-1", svc.Name,
		discoveryv1.EndpointPort{Name: ptr.To("port80"), Port: ptr.To(int32(8090)), Protocol: ptr.To(corev1.ProtocolTCP)}, p1.ip)
	b.customSlice(t, ns, "e2e-custom-slice-2", svc.Name,
		discoveryv1.EndpointPort{Name: ptr.To("port81"), Port: ptr.To(int32(8090)), Protocol: ptr.To(corev1.ProtocolTCP)}, p2.ip)
	client := b.execPod(t, ns, "node-c")
	answeredOnlyBy(t, "client", client.ns, vip(svc, 80), p1.name)
	answeredOnlyBy(t, "client", client.ns, vip(svc, 81), p2.name)
}

// functioningNodePort is SN-26: NodePort 80 -> 9376, two pods; from the
// exec pod the VIP and the NodePort of two nodes (one its own) reach both.
func (b *bed) functioningNodePort(t *testing.T) {
	ns := b.testNamespace(t, "nodeport-test")
	sel := map[string]string{"app": "nodeport-test"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nodeport-test"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel,
			Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(9376))}}})
	_, names := b.runPods(t, ns, "nodeport-test", sel, 9376, 0, "node-a", "node-b")
	exec := b.execPod(t, ns, "node-b")
	np := svc.Spec.Ports[0].NodePort
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), names)
	reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, "node-a"), np), names)
	reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, "node-b"), np), names)
}

// samePortProtocols is SN-102: ports tcp-port 80/TCP and udp-port 80/UDP
// to a pod serving both on 80; TCP-only: UDP stops within 30 s; UDP-only:
// TCP stops within 30 s.
func (b *bed) samePortProtocols(t *testing.T) {
	ns := b.testNamespace(t, "multiprotocol-test")
	sel := map[string]string{"app": "multiprotocol-test"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "multiprotocol-test"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{
			tcpPort("tcp-port", 80, intstr.FromInt(80)), udpPort("udp-port", 80, intstr.FromInt(80))}}})
	server := b.runPod(t, ns, netserver("multiprotocol-test", "node-a", sel, 80, 80))
	exec := b.execPod(t, ns, "node-b")
	target := vip(svc, 80)
	reachesAll(t, "execpod TCP", exec.ns, target, []string{server.name})
	reachesAllUDP(t, "execpod UDP", exec.ns, target, []string{server.name})

	b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[:1] })
	goesDownUDP(t, "execpod after TCP only", exec.ns, target, kubeProxyEndpointLagTimeout)
	reachesAll(t, "execpod TCP after TCP only", exec.ns, target, []string{server.name})

	b.updateService(t, ns, svc.Name, func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{udpPort("udp-port", 80, intstr.FromInt(80))}
	})
	goesDown(t, "execpod TCP after UDP only", exec.ns, target, kubeProxyEndpointLagTimeout)
	reachesAllUDP(t, "execpod UDP after UDP only", exec.ns, target, []string{server.name})
}

// externalNameService creates an ExternalName Service and two endpoint pods
// for it (they count once it is changed to a type with a selector).
func (b *bed) externalNameService(t *testing.T, ns, name string) (*corev1.Service, []string) {
	t.Helper()
	sel := map[string]string{"app": name}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "foo.example.com"}})
	_, names := b.runPods(t, ns, name, sel, 9376, 0, "node-a", "node-b")
	return svc, names
}

// toSelected turns an ExternalName Service into typ, 80 -> 9376 with a
// selector; the API server allocates its VIP (and node port).
func toSelected(typ corev1.ServiceType, name string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Type, s.Spec.ExternalName = typ, ""
		s.Spec.Selector = map[string]string{"app": name}
		s.Spec.Ports = []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(9376))}
	}
}

// toExternalName turns a Service into an ExternalName one pointing at
// another in-cluster Service's name; its VIP and node ports are released.
func toExternalName(ns string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "fooservice."+ns+".svc.cluster.local"
		s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = "", nil, nil, nil
		s.Spec.Selector, s.Spec.Ports = nil, nil
		s.Spec.ExternalTrafficPolicy, s.Spec.InternalTrafficPolicy = "", nil
	}
}

// externalNameToClusterIP is SN-108: the VIP allocated by the change
// reaches both pods.
func (b *bed) externalNameToClusterIP(t *testing.T) {
	ns := b.testNamespace(t, "en-to-clusterip")
	svc, names := b.externalNameService(t, ns, "externalname-service")
	svc = b.updateService(t, ns, svc.Name, toSelected(corev1.ServiceTypeClusterIP, svc.Name))
	exec := b.execPod(t, ns, "node-c")
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), names)
}

// externalNameToNodePort is SN-109: the VIP and the NodePort of two nodes.
func (b *bed) externalNameToNodePort(t *testing.T) {
	ns := b.testNamespace(t, "en-to-nodeport")
	svc, names := b.externalNameService(t, ns, "externalname-service")
	svc = b.updateService(t, ns, svc.Name, toSelected(corev1.ServiceTypeNodePort, svc.Name))
	exec := b.execPod(t, ns, "node-c")
	np := svc.Spec.Ports[0].NodePort
	reachesAll(t, "execpod", exec.ns, vip(svc, 80), names)
	reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, "node-a"), np), names)
	reachesAll(t, "execpod", exec.ns, nodePort(b.node(t, "node-c"), np), names)
}

// toExternalNameGoesDown is the body of SN-110 and SN-111: upstream only
// checks the DNS answer; the bed checks what the proxy owns: the old VIP
// (and NodePorts) stop answering, from a pod and from a node.
func (b *bed) toExternalNameGoesDown(t *testing.T, ns string, typ corev1.ServiceType) {
	sel := map[string]string{"app": "clusterip-service"}
	svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "clusterip-service"},
		Spec: corev1.ServiceSpec{Type: typ, Selector: sel, Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(9376))}}})
	_, names := b.runPods(t, ns, "clusterip-service", sel, 9376, 0, "node-a", "node-b")
	exec := b.execPod(t, ns, "node-c")
	host := b.runPod(t, ns, podSpec{name: "hostexec", node: "node-b", hostNetwork: true})
	targets := []netip.AddrPort{vip(svc, 80)}
	if np := svc.Spec.Ports[0].NodePort; np != 0 {
		targets = append(targets, nodePort(b.node(t, "node-a"), np), nodePort(b.node(t, "node-b"), np))
	}
	for _, a := range targets {
		reachesAll(t, "execpod", exec.ns, a, names)
	}
	got := b.updateService(t, ns, svc.Name, toExternalName(ns))
	if got.Spec.ClusterIP != "" || len(got.Spec.Ports) != 0 {
		t.Fatalf("after the change to ExternalName: clusterIP %q, ports %v", got.Spec.ClusterIP, got.Spec.Ports)
	}
	for _, a := range targets {
		goesDown(t, "execpod", exec.ns, a, kubeProxyEndpointLagTimeout)
		goesDown(t, "node-b", host.ns, a, kubeProxyEndpointLagTimeout)
	}
}

// clusterIPToExternalName is SN-110.
func (b *bed) clusterIPToExternalName(t *testing.T) {
	b.toExternalNameGoesDown(t, b.testNamespace(t, "clusterip-to-en"), corev1.ServiceTypeClusterIP)
}

// nodePortToExternalName is SN-111.
func (b *bed) nodePortToExternalName(t *testing.T) {
	b.toExternalNameGoesDown(t, b.testNamespace(t, "nodeport-to-en"), corev1.ServiceTypeNodePort)
}

// affinityTests are SN-51, SN-53, SN-54 and SN-56 (service.go): three
// netexec pods (one per node) behind a ClientIP Service, an exec pod on
// node-b; H9 through the VIP (type ClusterIP) or node-a's NodePort.
func (b *bed) affinityTests(t *testing.T) {
	ns := b.testNamespace(t, "affinity")
	sel := map[string]string{"app": "affinity"}
	b.runPods(t, ns, "affinity", sel, 9376, 0, "node-a", "node-b", "node-c")
	exec := b.execPod(t, ns, "node-b")
	create := func(name string, typ corev1.ServiceType) (*corev1.Service, netip.AddrPort) {
		svc := b.createService(t, ns, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: typ, Selector: sel, SessionAffinity: corev1.ServiceAffinityClientIP,
				Ports: []corev1.ServicePort{tcpPort("http", 80, intstr.FromInt(9376))}}})
		if typ == corev1.ServiceTypeNodePort {
			return svc, nodePort(b.node(t, "node-a"), svc.Spec.Ports[0].NodePort)
		}
		return svc, vip(svc, 80)
	}
	holds := func(t *testing.T, name string, typ corev1.ServiceType) {
		_, target := create(name, typ)
		eventually(t, "execpod -> "+target.String()+" answers", respondingTimeout, func() error {
			_, err := hostnameOverHTTP(exec.ns, target, 5*time.Second)
			return err
		})
		checkAffinity(t, "execpod", exec.ns, target, true)
	}
	switches := func(t *testing.T, name string, typ corev1.ServiceType) {
		svc, target := create(name, typ)
		checkAffinity(t, "execpod, ClientIP", exec.ns, target, true)
		b.updateService(t, ns, svc.Name, func(s *corev1.Service) {
			s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
		})
		checkAffinity(t, "execpod, None", exec.ns, target, false)
		b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP })
		checkAffinity(t, "execpod, ClientIP again", exec.ns, target, true)
	}
	// SN-51
	t.Run("should have session affinity work for service with type clusterIP [LinuxOnly]", func(t *testing.T) {
		holds(t, "affinity-clusterip", corev1.ServiceTypeClusterIP)
	})
	// SN-53
	t.Run("should be able to switch session affinity for service with type clusterIP [LinuxOnly]", func(t *testing.T) {
		switches(t, "affinity-clusterip-transition", corev1.ServiceTypeClusterIP)
	})
	// SN-54
	t.Run("should have session affinity work for NodePort service [LinuxOnly]", func(t *testing.T) {
		holds(t, "affinity-nodeport", corev1.ServiceTypeNodePort)
	})
	// SN-56
	t.Run("should be able to switch session affinity for NodePort service [LinuxOnly]", func(t *testing.T) {
		switches(t, "affinity-nodeport-transition", corev1.ServiceTypeNodePort)
	})
}
