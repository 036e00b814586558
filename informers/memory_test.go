package informers

// BenchmarkInformerCacheMemory measures what the informer caches keep: the
// heap the real Watcher holds once it has listed Services, EndpointSlices
// and Nodes shaped as the daemon benchmark (test/e2e/daemonbench) creates
// them, as the API server returns them (server-set fields and managedFields
// included), decoded from protobuf as the daemon's client decodes them.
//
//	go test -run '^$' -bench InformerCacheMemory -benchtime 1x ./informers/
//	# other sizes: -informers.services 2000 -informers.endpoints 5
//
// It reports heap figures, not times: cache-MiB is the live heap after a
// forced GC with the caches filled minus the same before the Watcher
// started; B/service is that per Service with its EndpointSlice (the nodes
// are included).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

var (
	memServices  = flag.Int("informers.services", 10000, "BenchmarkInformerCacheMemory: Services, each with one EndpointSlice")
	memEndpoints = flag.Int("informers.endpoints", 10, "BenchmarkInformerCacheMemory: endpoints per EndpointSlice")
)

// memShape says what the objects look like.
type memShape struct {
	name string
	// controller: as kubectl apply and the EndpointSlice controller make
	// them (selectors, app labels, last-applied-configuration, owner
	// references, targetRefs, zones, trigger times) and Nodes as a kubelet
	// reports them; otherwise exactly the daemon benchmark's objects.
	controller bool
	nodes      int
}

var memShapes = []memShape{
	{name: "daemonbench", nodes: 11},
	{name: "controller", controller: true, nodes: 100},
}

const memNS = "bench"

var memTime = metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))

func memUID(kind string, i int) types.UID {
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i, len(kind), i%4096, i%4096, i*7919))
}

func memField(manager, apiVersion, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: apiVersion,
		Time: &memTime, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

// memNode is the node of endpoint x: n1 for the first 4 (the real pods of
// the daemon benchmark), then n2..n(nodes).
func memNode(x, nodes int) string {
	if x < 4 {
		return "n1"
	}
	return "n" + strconv.Itoa(2+x%(nodes-1))
}

func memService(i int, sh memShape) *corev1.Service {
	name := fmt.Sprintf("s%05d", i)
	ip := netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)}).String()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: memNS, Name: name, UID: memUID("Service", i),
			ResourceVersion: strconv.Itoa(100000 + 2*i), CreationTimestamp: memTime,
			ManagedFields: []metav1.ManagedFieldsEntry{memField("daemonbench.test", "v1",
				`{"f:spec":{"f:internalTrafficPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:sessionAffinity":{},"f:type":{}}}`)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports:           []corev1.ServicePort{{Name: "", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
			SessionAffinity: corev1.ServiceAffinityNone, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        ptr.To(corev1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster)},
	}
	if sh.controller {
		svc.Labels = map[string]string{"app": name, "app.kubernetes.io/part-of": "shop", "team": "payments"}
		svc.Spec.Selector = map[string]string{"app": name}
		svc.Spec.Ports[0].Name = "http"
		svc.Spec.Ports[0].TargetPort = intstr.FromString("http")
		svc.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: fmt.Sprintf(
			`{"apiVersion":"v1","kind":"Service","metadata":{"annotations":{},"labels":{"app":%q,"app.kubernetes.io/part-of":"shop","team":"payments"},"name":%q,"namespace":%q},"spec":{"ports":[{"name":"http","port":80,"targetPort":"http"}],"selector":{"app":%q}}}`+"\n",
			name, name, memNS, name)}
		svc.ManagedFields = append(svc.ManagedFields, memField("kubectl-client-side-apply", "v1",
			`{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{".":{},"f:app":{},"f:app.kubernetes.io/part-of":{},"f:team":{}}},"f:spec":{"f:internalTrafficPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:selector":{},"f:sessionAffinity":{},"f:type":{}}}`))
	}
	return svc
}

func memSlice(i, endpoints int, sh memShape) *discoveryv1.EndpointSlice {
	svc := fmt.Sprintf("s%05d", i)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: memNS, Name: svc + "-1", UID: memUID("EndpointSlice", i),
			ResourceVersion: strconv.Itoa(100001 + 2*i), Generation: 1, CreationTimestamp: memTime,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "e2e-daemonbench"},
			ManagedFields: []metav1.ManagedFieldsEntry{memField("daemonbench.test", "discovery.k8s.io/v1",
				`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:labels":{".":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{}}},"f:ports":{}}`)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if sh.controller {
		s.Name = svc + "-" + fmt.Sprintf("%05x", i*31)
		s.GenerateName = svc + "-"
		s.Labels = map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
			"app": svc, "app.kubernetes.io/part-of": "shop", "team": "payments"}
		s.Annotations = map[string]string{AnnotationTriggerTime: memTime.UTC().Format(time.RFC3339Nano)}
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc, UID: memUID("Service", i),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		s.Ports[0].Name = ptr.To("http")
		s.ManagedFields = []metav1.ManagedFieldsEntry{memField("kube-controller-manager", "discovery.k8s.io/v1",
			`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:annotations":{".":{},"f:endpoints.kubernetes.io/last-change-trigger-time":{}},"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:app.kubernetes.io/part-of":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{},"f:team":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0\"}":{}}},"f:ports":{}}`)}
	}
	for j := 0; j < endpoints; j++ {
		x := (i*endpoints + j) % 20000
		e := discoveryv1.Endpoint{Addresses: []string{netip.AddrFrom4([4]byte{10, 244, byte(x / 250), byte(x%250 + 1)}).String()},
			NodeName:   ptr.To(memNode(x, sh.nodes)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)}}
		if sh.controller {
			e.Conditions.Terminating = ptr.To(false)
			e.Zone = ptr.To("zone-" + string(rune('a'+x%3)))
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: memNS, Name: fmt.Sprintf("%s-7d9c5b8f6-%05x", svc, x),
				UID: memUID("Pod", x)}
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

func memNodeObject(n int, sh memShape) *corev1.Node {
	name := "n" + strconv.Itoa(n)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: memUID("Node", n), ResourceVersion: strconv.Itoa(n),
		CreationTimestamp: memTime},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP,
			Address: netip.AddrFrom4([4]byte{198, 51, 100, byte(n)}).String()}}}}
	if !sh.controller {
		return node
	}
	node.Labels = map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m6i.2xlarge",
		"topology.kubernetes.io/zone": "zone-" + string(rune('a'+n%3)), "topology.kubernetes.io/region": "eu-west-1",
		"node-role.kubernetes.io/worker": ""}
	node.Annotations = map[string]string{"node.alpha.kubernetes.io/ttl": "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"ebs.csi.aws.com":"i-%017x"}`, n)}
	node.ManagedFields = []metav1.ManagedFieldsEntry{
		memField("kubelet", "v1", `{"f:metadata":{"f:annotations":{".":{},"f:volumes.kubernetes.io/controller-managed-attach-detach":{}},"f:labels":{".":{},"f:beta.kubernetes.io/arch":{},"f:beta.kubernetes.io/os":{},"f:kubernetes.io/arch":{},"f:kubernetes.io/hostname":{},"f:kubernetes.io/os":{}}},"f:spec":{"f:providerID":{}}}`),
		memField("kubelet", "v1", `{"f:status":{"f:allocatable":{"f:cpu":{},"f:ephemeral-storage":{},"f:memory":{}},"f:capacity":{"f:cpu":{},"f:ephemeral-storage":{},"f:memory":{}},"f:conditions":{"k:{\"type\":\"DiskPressure\"}":{"f:lastHeartbeatTime":{}},"k:{\"type\":\"MemoryPressure\"}":{"f:lastHeartbeatTime":{}},"k:{\"type\":\"PIDPressure\"}":{"f:lastHeartbeatTime":{}},"k:{\"type\":\"Ready\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}}},"f:images":{},"f:nodeInfo":{"f:bootID":{},"f:kernelVersion":{}}}}`),
	}
	node.Spec = corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.244.%d.0/24", n), PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", n)},
		ProviderID: fmt.Sprintf("aws:///eu-west-1a/i-%017x", n)}
	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name + ".eu-west-1.compute.internal"})
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32386544Ki"),
		corev1.ResourceEphemeralStorage: resource.MustParse("104845292Ki"), corev1.ResourcePods: resource.MustParse("110"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0")}
	node.Status.Capacity, node.Status.Allocatable = res, res.DeepCopy()
	for _, c := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"} {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse,
			LastHeartbeatTime: memTime, LastTransitionTime: memTime, Reason: "Kubelet" + string(c), Message: "kubelet has no " + string(c)})
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	node.Status.NodeInfo = corev1.NodeSystemInfo{MachineID: fmt.Sprintf("ec2%029x", n), SystemUUID: fmt.Sprintf("ec2%029x", n),
		BootID: fmt.Sprintf("%032x", n*31), KernelVersion: "6.1.0-56-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
		ContainerRuntimeVersion: "containerd://1.7.24", KubeletVersion: "v1.35.1", OperatingSystem: "linux", Architecture: "amd64"}
	for k := 0; k < 30; k++ {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
			Names: []string{fmt.Sprintf("registry.example.com/team/app-%02d@sha256:%064x", k, k*n),
				fmt.Sprintf("registry.example.com/team/app-%02d:v1.%d.0", k, k)}, SizeBytes: int64(40000000 + k*1000)})
	}
	return node
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// cacheHeap starts a Watcher with transform on the lists and returns the
// live heap it adds once every object went through the event handlers.
func cacheHeap(tb testing.TB, l memLists, services, nodes int, transform cache.TransformFunc) uint64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := liveHeap()
	w := startWatcher(ctx, tb, l, services, nodes, transform)
	after := liveHeap()
	runtime.KeepAlive(w)
	if after < before {
		return 0
	}
	return after - before
}

// startWatcher starts a Watcher on the lists and waits until every object
// went through the event handlers.
func startWatcher(ctx context.Context, tb testing.TB, l memLists, services, nodes int, transform cache.TransformFunc) *Watcher {
	return startWatcherOn(ctx, tb, (&memServer{lists: l}).client(), services, nodes, transform, DefaultPageSize)
}

// startWatcherOn is startWatcher on a client, with the lists' page size
// (newWatcher's).
func startWatcherOn(ctx context.Context, tb testing.TB, client kubernetes.Interface, services, nodes int, transform cache.TransformFunc, pageSize int64) *Watcher {
	w, err := newWatcher(client, "n1", nil, 0, nil, transform, pageSize)
	if err != nil {
		tb.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		tb.Fatal("caches did not sync")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		w.mu.Lock()
		done := len(w.dirty) == services && len(w.nodeView) == nodes
		w.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("handlers saw %d services, %d nodes; want %d, %d", w.Pending(), len(w.nodeView), services, nodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := len(w.ServiceNames()); got != services {
		tb.Fatalf("cache holds %d services, want %d", got, services)
	}
	return w
}

// stripHistory is the transform before the lean copies (commit d240003):
// managedFields and last-applied-configuration dropped in place. Kept here
// as the benchmark's reference.
func stripHistory(obj any) (any, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	m.SetManagedFields(nil)
	if a := m.GetAnnotations(); a != nil {
		delete(a, corev1.LastAppliedConfigAnnotation)
	}
	return obj, nil
}

var memTransforms = []struct {
	name string
	fn   cache.TransformFunc
}{
	{"none", nil},
	{"history", stripHistory},
	{"lean-no-intern", newLeaner(false).transform},
	{"StripUnused", StripUnused},
}

func BenchmarkInformerCacheMemory(b *testing.B) {
	services, endpoints := *memServices, *memEndpoints
	for _, sh := range memShapes {
		l := memEncode(b, services, endpoints, sh)
		for _, tr := range memTransforms {
			b.Run(sh.name+"/"+tr.name, func(b *testing.B) {
				var heap uint64
				for b.Loop() {
					heap = cacheHeap(b, l, services, sh.nodes, tr.fn)
				}
				b.ReportMetric(float64(heap)/(1<<20), "cache-MiB")
				b.ReportMetric(float64(heap)/float64(services), "B/service")
			})
		}
	}
}

// BenchmarkSyncGC measures what the GC settings cost and save in the
// daemon's steady state, natively: the Watcher's caches filled with the
// daemon benchmark's objects (StripUnused), and per op what the sync loop
// does in-process: a partial sync — one Service converted again
// (Watcher.Service) and planned incrementally (planner.Incremental: Update,
// State) — and, every fullEvery ops, a full sync that converts and plans
// every Service into a new Incremental. Per setting it reports the time
// per op, the GC's share of the process CPU (runtime/metrics), the largest
// heap goal (the heap the runtime lets grow before collecting: the peak's
// main part) and the peak RSS (VmHWM, reset before each setting). The
// settings run from the most to the least frequent collection, so that
// each one's RSS is its own.
//
//	go test -run '^$' -bench SyncGC -benchtime 2000x ./informers/
func BenchmarkSyncGC(b *testing.B) {
	services, endpoints := *memServices, *memEndpoints
	sh := memShapes[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatcher(ctx, b, memEncode(b, services, endpoints, sh), services, sh.nodes, StripUnused)
	o := planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	keys := w.ServiceNames()
	// fullEvery: a full sync every 30 s with a change every 100 ms.
	const fullEvery = 300
	full := func() *planner.Incremental {
		nodes, refusals := w.Nodes()
		inc := planner.NewIncremental(o, nodes, refusals)
		for _, k := range keys {
			ports, eps, rs := w.Service(k)
			inc.Update(k, ports, eps, rs)
		}
		inc.State()
		return inc
	}
	const noLimit = math.MaxInt64
	for _, gc := range []struct {
		name    string
		percent int
		limit   int64
	}{
		{"GOGC=25", 25, noLimit},
		{"GOGC=50", 50, noLimit},
		{"GOGC=100,GOMEMLIMIT=100MiB", 100, 100 << 20},
		{"GOGC=100,GOMEMLIMIT=120MiB", 100, 120 << 20},
		{"GOGC=100", 100, noLimit},
	} {
		b.Run(gc.name, func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(gc.percent))
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(gc.limit))
			debug.FreeOSMemory()
			hwmReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
			samples := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/gc/heap/goal:bytes"}}
			metrics.Read(samples)
			gc0, total0 := samples[0].Value.Float64(), samples[1].Value.Float64()
			inc := full()
			var last planner.State
			var goal uint64
			i := 0
			for b.Loop() {
				i++
				if i%fullEvery == 0 {
					inc = full()
				}
				k := keys[i*7919%len(keys)]
				ports, eps, rs := w.Service(k)
				inc.Update(k, ports, eps, rs)
				last = inc.State()
				metrics.Read(samples[2:])
				goal = max(goal, samples[2].Value.Uint64())
			}
			runtime.KeepAlive(last)
			metrics.Read(samples)
			if d := samples[1].Value.Float64() - total0; d > 0 {
				b.ReportMetric(100*(samples[0].Value.Float64()-gc0)/d, "gc-cpu-%")
			}
			b.ReportMetric(float64(goal)/(1<<20), "heap-goal-MiB")
			if hwm, err := vmHWM(); err == nil && hwmReset {
				b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
			}
		})
	}
}

// vmHWM is the process's peak RSS in bytes.
func vmHWM() (uint64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read /proc/self/status: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmHWM %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}
