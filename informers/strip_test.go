package informers

import (
	"context"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// fullService sets every field the conversion reads, and many it does not.
func fullService() *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{Kind: "Service", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u-web", ResourceVersion: "7", Generation: 2,
			CreationTimestamp: metav1.Unix(1, 0), DeletionTimestamp: ptr.To(metav1.Unix(2, 0)),
			Labels: map[string]string{"app": "web", convert.LabelServiceProxyName: ""},
			Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"kind":"Service"}`,
				convert.AnnotationScheduler: " lc ", convert.AnnotationSourceRanges: "192.0.2.0/24, 198.51.100.0/24", "other": "x"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "X", Name: "y"}}, Finalizers: []string{"f"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
			Selector:    map[string]string{"app": "web"},
			ExternalIPs: []string{"198.51.100.7", "bad"}, LoadBalancerSourceRanges: []string{"203.0.113.0/24"},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 30999,
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(60))}},
			TrafficDistribution:   ptr.To("PreferClose"),
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			IPFamilyPolicy:        ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromString("http"), AppProtocol: ptr.To("http")},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 70000},
				{Name: "bad", Protocol: "ICMP", Port: 1},
			},
		},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "192.0.2.50", Hostname: "lb.example", Ports: []corev1.PortStatus{{Port: 80}}},
				{IP: "192.0.2.51", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
				{Hostname: "only.example"}, {IP: "x"},
			}},
			Conditions: []metav1.Condition{{Type: "LoadBalancerReady", Status: metav1.ConditionTrue}},
		},
	}
}

func fullSlice() *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default", UID: "u-slice", ResourceVersion: "8",
			Labels:          map[string]string{convert.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web"},
			Annotations:     map[string]string{AnnotationTriggerTime: "2026-11-24T10:00:00Z", "other": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "u-web", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080)), AppProtocol: ptr.To("http")},
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(5353))},
			{Name: ptr.To("x"), Protocol: ptr.To(corev1.Protocol("ICMP")), Port: ptr.To(int32(1))},
			{Name: ptr.To("noport")},
		},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5", "10.244.1.6"}, Hostname: ptr.To("pod-a"),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-1", UID: "u-pod"},
				NodeName:   ptr.To("n1"), Zone: ptr.To("zone-a"), DeprecatedTopology: map[string]string{"k": "v"},
				Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}, ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}},
			{Addresses: []string{"10.244.2.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)},
				NodeName: ptr.To("n2"), Zone: ptr.To("zone-b")},
			{Addresses: nil},
			{Addresses: []string{"127.0.0.1"}},
			{Addresses: []string{"fd00::1"}},
			{Addresses: []string{"10.244.3.5"}},
		},
	}
}

func fullNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("u-" + name), ResourceVersion: "9", DeletionTimestamp: ptr.To(metav1.Unix(3, 0)),
			Labels:        map[string]string{"topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": name},
			Annotations:   map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", ProviderID: "aws:///x", Unschedulable: true,
			Taints: []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: "192.168.0.1"},
				{Type: corev1.NodeExternalIP, Address: "bad"}, {Type: corev1.NodeInternalIP, Address: "fd00::1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry/app:v1"}, SizeBytes: 1}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.35.1"},
		},
	}
}

func strip[T any](t *testing.T, obj T) T {
	t.Helper()
	out, err := StripUnused(obj)
	if err != nil {
		t.Fatalf("StripUnused: %v", err)
	}
	o, ok := out.(T)
	if !ok {
		t.Fatalf("StripUnused returned %T, want %T", out, obj)
	}
	return o
}

// cached is what the transform makes of an EndpointSlice.
func cached(t *testing.T, sl *discoveryv1.EndpointSlice) *cachedSlice {
	t.Helper()
	out, err := StripUnused(sl)
	if err != nil {
		t.Fatalf("StripUnused: %v", err)
	}
	c, ok := out.(*cachedSlice)
	if !ok {
		t.Fatalf("StripUnused returned %T for an EndpointSlice, want *cachedSlice", out)
	}
	return c
}

// cachedSvc is what the transform makes of a Service.
func cachedSvc(t *testing.T, svc *corev1.Service) *cachedService {
	t.Helper()
	out, err := StripUnused(svc)
	if err != nil {
		t.Fatalf("StripUnused: %v", err)
	}
	c, ok := out.(*cachedService)
	if !ok {
		t.Fatalf("StripUnused returned %T for a Service, want *cachedService", out)
	}
	return c
}

// apiSlice is what the conversion reads of an EndpointSlice's cache entry.
func apiSlice(t *testing.T, sl *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	t.Helper()
	return cached(t, sl).api()
}

func TestStripUnused(t *testing.T) {
	svc, sl, node := fullService(), fullSlice(), fullNode("n1")
	svc0, sl0, node0 := svc.DeepCopy(), sl.DeepCopy(), node.DeepCopy()
	csvc, csl, ln := cachedSvc(t, svc), cached(t, sl), strip(t, node)
	ls, lsl := csvc.api(), csl.api()

	// The originals are untouched: the cache gets a copy.
	if !reflect.DeepEqual(svc, svc0) || !reflect.DeepEqual(sl, sl0) || !reflect.DeepEqual(node, node0) {
		t.Error("StripUnused modified the original object")
	}
	if ls == svc || lsl == sl || ln == node {
		t.Error("StripUnused returned the original, not a lean copy")
	}

	// What goes.
	if len(ls.ManagedFields) != 0 || len(lsl.ManagedFields) != 0 || len(ln.ManagedFields) != 0 {
		t.Error("managedFields kept")
	}
	// A lean copy passes the transform again unchanged (client-go applies
	// it twice to a listed object); a deep copy of it is no lean copy.
	if strip(t, ln) != ln {
		t.Error("StripUnused copied a lean copy again")
	}
	for _, c := range []any{csvc, csl} {
		if again, err := StripUnused(c); err != nil || again != c {
			t.Errorf("StripUnused copied a cache entry (%T) again", c)
		}
	}
	if c := ln.DeepCopy(); strip(t, c) == c {
		t.Error("StripUnused took a deep copy of a lean copy for its own")
	}
	if ls.Spec.Selector != nil || ls.Spec.IPFamilies != nil || ls.Spec.Ports[0].TargetPort != (intstr.IntOrString{}) ||
		ls.Spec.Ports[0].AppProtocol != nil || ls.Status.Conditions != nil || ls.Status.LoadBalancer.Ingress[0].Hostname != "" ||
		ls.Status.LoadBalancer.Ingress[0].Ports != nil || ls.OwnerReferences != nil || ls.Finalizers != nil {
		t.Errorf("unread Service fields kept: %+v", ls)
	}
	if want := map[string]string{convert.AnnotationScheduler: " lc ", convert.AnnotationSourceRanges: "192.0.2.0/24, 198.51.100.0/24"}; !reflect.DeepEqual(ls.Annotations, want) {
		t.Errorf("Service annotations %v, want %v", ls.Annotations, want)
	}
	if want := map[string]string{convert.LabelServiceProxyName: ""}; !reflect.DeepEqual(ls.Labels, want) {
		t.Errorf("Service labels %v, want %v", ls.Labels, want)
	}
	e0 := lsl.Endpoints[0]
	if e0.TargetRef != nil || e0.Hostname != nil || e0.DeprecatedTopology != nil || len(e0.Addresses) != 1 ||
		lsl.OwnerReferences != nil || lsl.Ports[0].AppProtocol != nil || csl.GetLabels() != nil || csl.GetAnnotations() != nil ||
		lsl.Annotations != nil || lsl.ManagedFields != nil {
		t.Errorf("unread EndpointSlice fields kept: %+v", csl)
	}
	if want := map[string]string{convert.LabelServiceName: "web"}; !reflect.DeepEqual(lsl.Labels, want) {
		t.Errorf("EndpointSlice labels %v, want %v", lsl.Labels, want)
	}
	if csl.trigger != "2026-11-24T10:00:00Z" {
		t.Errorf("EndpointSlice trigger time %q", csl.trigger)
	}
	if c, ok := csl.DeepCopyObject().(*cachedSlice); !ok || !reflect.DeepEqual(c, csl) || &c.endpoints[0] == &csl.endpoints[0] {
		t.Errorf("DeepCopyObject: %+v", c)
	}
	if c, ok := csvc.DeepCopyObject().(*cachedService); !ok || !reflect.DeepEqual(c, csvc) || &c.ports[0] == &csvc.ports[0] {
		t.Errorf("DeepCopyObject: %+v", c)
	}
	if ln.Spec.PodCIDR != node.Spec.PodCIDR || !slices.Equal(ln.Spec.PodCIDRs, node.Spec.PodCIDRs) {
		t.Errorf("Node pod CIDRs %q %q, want %q %q", ln.Spec.PodCIDR, ln.Spec.PodCIDRs, node.Spec.PodCIDR, node.Spec.PodCIDRs)
	}
	if ln.Annotations != nil || ln.Spec.ProviderID != "" || ln.Status.Conditions != nil ||
		ln.Status.Images != nil || ln.Status.NodeInfo != (corev1.NodeSystemInfo{}) {
		t.Errorf("unread Node fields kept: %+v", ln)
	}

	// What stays: identity, what health (a Node's deletion) and Events
	// (the UID of a Service or Node) read, in the cache entries and in what
	// they rebuild. An EndpointSlice's UID, which nothing reads, goes.
	for _, c := range []struct {
		got, want metav1.Object
		uid       types.UID
	}{{ls, svc, svc.UID}, {csvc, svc, svc.UID}, {lsl, sl, ""}, {csl, sl, ""}, {ln, node, node.UID}} {
		if c.got.GetName() != c.want.GetName() || c.got.GetNamespace() != c.want.GetNamespace() || c.got.GetUID() != c.uid ||
			c.got.GetResourceVersion() != c.want.GetResourceVersion() {
			t.Errorf("%s (%T): identity not kept", c.want.GetName(), c.got)
		}
	}
	if !reflect.DeepEqual(ln.DeletionTimestamp, node.DeletionTimestamp) {
		t.Errorf("Node deletion timestamp %v, want %v", ln.DeletionTimestamp, node.DeletionTimestamp)
	}
	if !reflect.DeepEqual(ln.Labels, node.Labels) || !reflect.DeepEqual(ln.Spec.Taints, node.Spec.Taints) || !ln.Spec.Unschedulable {
		t.Errorf("Node labels, taints or unschedulable not kept: %+v", ln)
	}

	// Idempotent: client-go may transform an object twice.
	for _, o := range []any{csvc, csl, ln} {
		again, err := StripUnused(o)
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Errorf("StripUnused not idempotent on %T: %+v", o, again)
		}
	}

	// Interning: equal node names and zones share one pointer.
	a, b := cached(t, fullSlice()), cached(t, fullSlice())
	if a.endpoints[1].topo != b.endpoints[1].topo || a.endpoints[0].topo.nodeName != b.endpoints[0].topo.nodeName ||
		a.endpoints[0].topo.zone != b.endpoints[0].topo.zone {
		t.Error("node names and zones of two slices are not shared")
	}

	// A tombstone, a nil object and a non-object pass through.
	tomb := cache.DeletedFinalStateUnknown{Key: "default/web", Obj: svc}
	if out, err := StripUnused(tomb); err != nil || !reflect.DeepEqual(out, tomb) {
		t.Errorf("tombstone: %v %v", out, err)
	}
	if out, err := StripUnused((*corev1.Service)(nil)); err != nil || out.(*corev1.Service) != nil {
		t.Errorf("nil Service: %v %v", out, err)
	}
	if out, err := StripUnused("x"); err != nil || out != "x" {
		t.Errorf("non-object: %v %v", out, err)
	}
}

// TestStripUnusedConverts: whatever the proxy computes from a cached object
// is the same from its lean copy.
func TestStripUnusedConverts(t *testing.T) {
	objs := func() ([]*corev1.Service, []*discoveryv1.EndpointSlice, []*corev1.Node) {
		svcs := []*corev1.Service{fullService()}
		eps := []*discoveryv1.EndpointSlice{fullSlice()}
		nodes := []*corev1.Node{fullNode("n1"), fullNode("n2")}
		// Deleting or modifying the fields that matter must show.
		s2 := fullService()
		s2.Name, s2.Labels = "web2", map[string]string{"app": "web"}
		s2.Spec.Type = corev1.ServiceTypeNodePort
		svcs = append(svcs, s2)
		sl2 := fullSlice()
		sl2.Name, sl2.Labels[convert.LabelServiceName] = "web2-x", "web2"
		eps = append(eps, sl2)
		// IPv4 addresses are kept inline unless a slice has another
		// address: an endpoint without one between them, and a slice
		// whose one IPv4-mapped IPv6 address keeps them all as text.
		sl3 := fullSlice()
		sl3.Name, sl3.Labels[convert.LabelServiceName] = "web2-v4", "web2"
		sl3.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.244.4.5"}}, {}, {Addresses: []string{"10.244.4.66", "x"}},
			{Addresses: []string{"0.0.0.0"}}, {Addresses: []string{"255.255.255.255"}}}
		sl4 := fullSlice()
		sl4.Name, sl4.Labels[convert.LabelServiceName] = "web2-mapped", "web2"
		sl4.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.244.5.5"}}, {Addresses: []string{"::ffff:10.244.5.6"}},
			{Addresses: []string{"10.244.5.7"}}}
		eps = append(eps, sl3, sl4)
		for i := range 20 {
			sh := memShapes[i%2]
			svcs = append(svcs, memService(i, sh))
			eps = append(eps, memSlice(i, 3, sh))
		}
		return svcs, eps, nodes
	}
	svcs, eps, nodes := objs()
	var lsvcs []*corev1.Service
	var leps []*discoveryv1.EndpointSlice
	var lnodes []*corev1.Node
	for _, s := range svcs {
		lsvcs = append(lsvcs, cachedSvc(t, s).api())
	}
	for _, s := range eps {
		leps = append(leps, apiSlice(t, s))
	}
	for _, n := range nodes {
		lnodes = append(lnodes, strip(t, n))
	}
	want, got := convert.Convert(svcs, eps, nodes), convert.Convert(lsvcs, leps, lnodes)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Convert differs after StripUnused:\ngot  %+v\nwant %+v", got, want)
	}
	if len(want.Services) < 20 || len(want.Refusals) < 5 || len(want.Endpoints) < 20 {
		t.Fatalf("the test cluster is too small to prove anything: %d ports, %d endpoint lists, %d refusals",
			len(want.Services), len(want.Endpoints), len(want.Refusals))
	}
	for i := range eps {
		n, _ := convert.SliceService(eps[i])
		ln, _ := convert.SliceService(leps[i])
		if n != ln || eps[i].Annotations[AnnotationTriggerTime] != cached(t, eps[i]).trigger {
			t.Errorf("slice %s: service key or trigger time differs", eps[i].Name)
		}
	}
	for i := range svcs {
		if convert.SkipReason(svcs[i]) != convert.SkipReason(lsvcs[i]) {
			t.Errorf("service %s: skip reason differs", svcs[i].Name)
		}
	}

	// The same through the Watcher, whose caches hold what the transform
	// returned: with and without it, every service and node reads the same.
	watch := func(transform cache.TransformFunc) *Watcher {
		svcs, eps, nodes := objs()
		client := fake.NewClientset()
		for _, o := range svcs {
			mustCreate(t, client.Tracker().Add(o))
		}
		for _, o := range eps {
			mustCreate(t, client.Tracker().Add(o))
		}
		for _, o := range nodes {
			mustCreate(t, client.Tracker().Add(o))
		}
		w, err := newWatcher(client, "n1", nil, 0, nil, transform, DefaultPageSize)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		w.Start(ctx)
		if !w.WaitForCacheSync(ctx) {
			t.Fatal("caches did not sync")
		}
		waitFor(t, "handlers", func() bool { return w.Pending() == len(svcs) })
		return w
	}
	plain, lean := watch(nil), watch(StripUnused)
	keys := plain.ServiceNames()
	// default/web carries the service-proxy-name label: not listed.
	if len(keys) != len(svcs)-1 || !reflect.DeepEqual(keys, lean.ServiceNames()) {
		t.Fatalf("service keys %v, lean %v", keys, lean.ServiceNames())
	}
	type svcView struct {
		Ports     []model.ServicePort
		Endpoints map[model.ServicePortName][]model.Endpoint
		Refusals  []model.Refusal
	}
	for _, k := range keys {
		var a, b svcView
		a.Ports, a.Endpoints, a.Refusals = plain.Service(k)
		b.Ports, b.Endpoints, b.Refusals = lean.Service(k)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("Watcher.Service(%s) differs with StripUnused:\n%+v\n%+v", k, b, a)
		}
	}
	na, ra := plain.Nodes()
	nb, rb := lean.Nodes()
	if !reflect.DeepEqual(na, nb) || !reflect.DeepEqual(ra, rb) {
		t.Errorf("Watcher.Nodes differs with StripUnused:\n%+v %+v\n%+v %+v", nb, rb, na, ra)
	}
	if !reflect.DeepEqual(plain.Cluster(), lean.Cluster()) {
		t.Error("Watcher.Cluster differs with StripUnused")
	}
	if a, b := plain.ServiceObject("default", "web2"), lean.ServiceObject("default", "web2"); a == nil || b == nil || a.UID != b.UID {
		t.Error("the Service UID Events name differs with StripUnused")
	}
	if a, b := plain.NodeObject("n1"), lean.NodeObject("n1"); a == nil || b == nil || a.UID != b.UID ||
		!reflect.DeepEqual(a.Spec.Taints, b.Spec.Taints) || !reflect.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) {
		t.Error("the Node fields health and Events read differ with StripUnused")
	}
}

func mustCreate(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The trigger time survives in the events the Watcher's handlers see.
func TestStripUnusedKeepsTriggerTime(t *testing.T) {
	sl := fullSlice()
	w := &Watcher{dirty: map[types.NamespacedName]bool{}, triggers: map[types.NamespacedName]time.Time{}, notify: make(chan struct{}, 1)}
	w.onSlice(cached(t, sl))
	if got := w.TakeChanges().Triggers[types.NamespacedName{Namespace: "default", Name: "web"}]; !got.Equal(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("trigger time %v", got)
	}
}

// Changes.Seen is when the handler recorded the first change not yet
// taken: later events keep it, TakeChanges clears it.
func TestChangesSeen(t *testing.T) {
	w := &Watcher{dirty: map[types.NamespacedName]bool{}, triggers: map[types.NamespacedName]time.Time{}, notify: make(chan struct{}, 1)}
	before := time.Now()
	w.onSlice(cached(t, fullSlice()))
	after := time.Now()
	time.Sleep(time.Millisecond)
	w.onSlice(cached(t, fullSlice()))
	c := w.TakeChanges()
	if c.Seen.Before(before) || c.Seen.After(after) {
		t.Errorf("Seen %v, want the first event's time, between %v and %v", c.Seen, before, after)
	}
	if c := w.TakeChanges(); !c.Seen.IsZero() {
		t.Errorf("Seen %v after a take with nothing new, want zero", c.Seen)
	}
}

// TestCachedServiceExtras: each field a cachedService keeps apart
// (serviceExtras) survives alone, on a Service that sets no other.
func TestCachedServiceExtras(t *testing.T) {
	base := func() *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u-web"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster), SessionAffinity: corev1.ServiceAffinityNone,
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	}
	plain := cachedSvc(t, base())
	if plain.extras != nil {
		t.Errorf("a ClusterIP Service keeps extras: %+v", plain.extras)
	}
	for name, set := range map[string]func(*corev1.Service){
		"label":               func(s *corev1.Service) { s.Labels = map[string]string{convert.LabelServiceProxyName: "x"} },
		"annotation":          func(s *corev1.Service) { s.Annotations = map[string]string{convert.AnnotationScheduler: "lc"} },
		"externalIPs":         func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} },
		"sourceRanges":        func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} },
		"etp":                 func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
		"affinityConfig":      func(s *corev1.Service) { s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{} },
		"trafficDistribution": func(s *corev1.Service) { s.Spec.TrafficDistribution = ptr.To("PreferClose") },
		"ingress": func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.2"}}
		},
		"healthCheckNodePort": func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 30000 },
	} {
		s := base()
		set(s)
		c := cachedSvc(t, s)
		if c.extras == nil || reflect.DeepEqual(c.api(), plain.api()) {
			t.Errorf("%s: not kept", name)
		}
	}
}
