package informers

import (
	"context"
	"fmt"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// LabelHeadless marks the EndpointSlices of a headless Service; the
// EndpointSlice controller sets it and kube-proxy never watches them.
const LabelHeadless = corev1.IsHeadlessService

// AnnotationTriggerTime is set by the EndpointSlice controller to the time
// of the change that caused the slice's last update; network-programming
// latency is measured from it.
const AnnotationTriggerTime = corev1.EndpointsLastChangeTriggerTime

// Changes are what happened since the last TakeChanges.
type Changes struct {
	// Services are the Services whose Service object or EndpointSlices
	// changed, sorted by namespace and name.
	Services []types.NamespacedName
	// Nodes is true when any Node's addresses, this node's labels or pod
	// CIDRs, or the API server's endpoints (the default/kubernetes
	// EndpointSlices) changed: the guard changed, and the services naming
	// an address whose protection changed must be planned again (all of
	// them when this node's own Node changed).
	Nodes bool
	// Triggers maps a Service to the oldest EndpointSlice change trigger
	// time among its changes (only slices that carry the annotation).
	Triggers map[types.NamespacedName]time.Time
	// Seen is when the Watcher's event handler recorded the first of
	// these changes (zero for none, or for a Requeue alone): the sync
	// loop logs how long they waited for it.
	Seen time.Time
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Services) == 0 && !c.Nodes }

// Watcher watches Services, EndpointSlices and Nodes with kube-proxy's
// selectors (no service.kubernetes.io/service-proxy-name label, no headless
// label), tracks which services changed, and caches every Node's addresses
// (written to the state file whenever they change). It never modifies an
// API object.
type Watcher struct {
	log      *zap.Logger
	nodeName string
	factory  informers.SharedInformerFactory
	nodes    informers.SharedInformerFactory

	svcInf, sliceInf, nodeInf cache.SharedIndexInformer
	nodeLister                corelisters.NodeLister

	addrs *NodeAddressCache
	// handlers report whether each event handler has seen its informer's
	// first full list; nodesSynced is the Node handler's, slicesSynced the
	// EndpointSlice handler's.
	handlers                  []cache.InformerSynced
	nodesSynced, slicesSynced cache.InformerSynced

	mu sync.Mutex
	// svcVIPs are the cached Services' addresses as IsServiceIP last
	// gathered them (valid: svcVIPsOK), svcGen counts Service events.
	svcVIPs   serviceVIPs
	svcVIPsOK bool
	// vipChanged are the Service VIPs added or removed since the last
	// TakeChanges (fileService).
	vipChanged map[netip.Addr]struct{}
	svcGen     uint64
	// bySvc are the cached EndpointSlices of each Service. Services have
	// no index by ClusterIP: IsServiceIP, asked a few times per full
	// sync, scans the cache rather than keep a set per Service (see
	// BenchmarkIsServiceIP).
	bySvc    sliceIndex
	dirty    map[types.NamespacedName]bool
	triggers map[types.NamespacedName]time.Time
	nodesChg bool
	// seen is when the first change not yet taken was recorded
	// (Changes.Seen).
	seen time.Time
	// nodeView is what of the Nodes matters to planning, to tell a real
	// change from a heartbeat.
	nodeView  map[string][]netip.Addr
	localView map[string]string
	// localCIDRs are this node's spec.podCIDRs and spec.podCIDR as last
	// seen: the rules' NodePodCIDR.
	localCIDRs []string
	// apiView are the API server's endpoints (APIServerEndpoints).
	apiView []netip.Addr
	notify  chan struct{}
	// OnLocalNode, if set, is called with this node's Node object whenever
	// it is added or updated (health uses it for node eligibility).
	OnLocalNode func(*corev1.Node)
	// OnChange, if set, is called after every recorded change (health's
	// QueuedUpdate, the pending-changes gauge).
	OnChange func()
	// OnServiceChange and OnEndpointsChange, if set, are called with the
	// Service on every event of a Service or of one of its
	// EndpointSlices (kube-proxy's change counters).
	OnServiceChange, OnEndpointsChange func(service types.NamespacedName)
	// Converter converts the cached Services (Service); set it before
	// Start. The zero value has the default limits.
	Converter convert.Converter
}

// ProxySelector is kube-proxy's label selector for Services and
// EndpointSlices: no service-proxy-name label, no headless label.
func ProxySelector() labels.Selector {
	noProxyName, err1 := labels.NewRequirement(convert.LabelServiceProxyName, selection.DoesNotExist, nil)
	noHeadless, err2 := labels.NewRequirement(LabelHeadless, selection.DoesNotExist, nil)
	if err1 != nil || err2 != nil {
		panic(fmt.Sprintf("label requirements: %v %v", err1, err2))
	}
	return labels.NewSelector().Add(*noProxyName, *noHeadless)
}

// NewWatcher builds the informers. addrs may be nil (no state file);
// load it first (NodeAddressCache.Load) to remember the Nodes deleted
// while no proxy ran.
// resync is the informers' resync period (0: none; the sync loop does its
// own periodic full sync).
func NewWatcher(client kubernetes.Interface, nodeName string, addrs *NodeAddressCache, resync time.Duration, log *zap.Logger) (*Watcher, error) {
	return newWatcher(client, nodeName, addrs, resync, log, StripUnused, DefaultPageSize)
}

// newWatcher is NewWatcher with the informers' transform given (nil: none)
// and the page size of their lists (PagedList; below 0: client-go's own
// unpaged informers, the memory benchmarks' reference).
func newWatcher(client kubernetes.Interface, nodeName string, addrs *NodeAddressCache, resync time.Duration, log *zap.Logger, transform cache.TransformFunc, pageSize int64) (*Watcher, error) {
	if log == nil {
		log = zap.NewNop()
	}
	sel := ProxySelector().String()
	w := &Watcher{
		log:      log,
		nodeName: nodeName,
		factory: informers.NewSharedInformerFactoryWithOptions(client, resync,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }),
			informers.WithTransform(transform)),
		nodes:     informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(transform)),
		addrs:     addrs,
		dirty:     map[types.NamespacedName]bool{},
		triggers:  map[types.NamespacedName]time.Time{},
		nodeView:  map[string][]netip.Addr{},
		localView: map[string]string{},
		bySvc:     sliceIndex{},
		notify:    make(chan struct{}, 1),
	}
	svc := w.factory.Core().V1().Services()
	sl := w.factory.Discovery().V1().EndpointSlices()
	nd := w.nodes.Core().V1().Nodes()
	if pageSize >= 0 {
		// The same informers, registered first with a paged list.
		svcs, eps, nodes := client.CoreV1().Services(""), client.DiscoveryV1().EndpointSlices(""), client.CoreV1().Nodes()
		pagedInformer(w.factory, &corev1.Service{}, client, transform, pageSize, listOf(svcs.List, sel), watchOf(svcs.Watch, sel))
		pagedInformer(w.factory, &discoveryv1.EndpointSlice{}, client, transform, pageSize, listOf(eps.List, sel), watchOf(eps.Watch, sel))
		pagedInformer(w.nodes, &corev1.Node{}, client, transform, pageSize, listOf(nodes.List, ""), watchOf(nodes.Watch, ""))
	}
	w.svcInf, w.sliceInf, w.nodeInf = svc.Informer(), sl.Informer(), nd.Informer()
	// The Service and EndpointSlice caches hold cachedServices and
	// cachedSlices (StripUnused): read through the store and bySvc, never
	// a generated lister.
	w.nodeLister = nd.Lister()
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		fn  func(any)
		// file, if set, is called before fn with the object an event
		// replaces (nil for an addition) and the new one (nil for a
		// deletion).
		file func(old, cur any)
	}{{w.svcInf, w.onService, w.fileService}, {w.sliceInf, w.onSlice, w.fileSlice}, {w.nodeInf, w.onNode, nil}} {
		fn, file := h.fn, h.file
		if file == nil {
			file = func(_, _ any) {}
		}
		reg, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { file(nil, obj); fn(obj) },
			UpdateFunc: func(old, obj any) { file(old, obj); fn(obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				file(obj, nil)
				fn(obj)
			},
		})
		if err != nil {
			return nil, fmt.Errorf("event handler: %w", err)
		}
		w.handlers = append(w.handlers, reg.HasSynced)
		switch h.inf {
		case w.nodeInf:
			w.nodesSynced = reg.HasSynced
		case w.sliceInf:
			w.slicesSynced = reg.HasSynced
		}
	}
	return w, nil
}

// Start starts watching; it returns at once. Watching stops when ctx ends.
func (w *Watcher) Start(ctx context.Context) {
	w.factory.Start(ctx.Done())
	w.nodes.Start(ctx.Done())
}

// WaitForCacheSync blocks until every cache has its first full list and
// the Watcher's handlers have seen it, or ctx ends (then it returns
// false). Then the node address cache holds exactly the Nodes listed, and
// those it knew (from the file an earlier run wrote) that are not are
// deleted from now on.
func (w *Watcher) WaitForCacheSync(ctx context.Context) bool {
	if !cache.WaitForCacheSync(ctx.Done(), w.handlers...) {
		return false
	}
	w.writeNodeCache()
	return true
}

// writeNodeCache records the Nodes in the API in the node address cache.
// Only once the Node handler has seen the first full list: before, a Node
// not yet delivered would be taken as deleted.
func (w *Watcher) writeNodeCache() {
	if w.addrs == nil || !w.nodesSynced() {
		return
	}
	w.mu.Lock()
	view := w.nodeViewCopy()
	api := slices.Clone(w.apiView)
	w.mu.Unlock()
	if err := w.addrs.Set(view); err != nil {
		w.log.Error("cannot write node address cache", zap.Error(err))
	}
	if w.slicesSynced() {
		if err := w.addrs.SetAPIServers(api); err != nil {
			w.log.Error("cannot write node address cache", zap.Error(err))
		}
	}
}

// Notify receives a value whenever changes are waiting (coalesced: one
// value for any number of changes).
func (w *Watcher) Notify() <-chan struct{} { return w.notify }

func (w *Watcher) signal() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
	if w.OnChange != nil {
		w.OnChange()
	}
}

func (w *Watcher) markService(key types.NamespacedName) {
	w.mu.Lock()
	w.dirty[key] = true
	w.noteSeen()
	w.mu.Unlock()
	w.signal()
}

func (w *Watcher) onService(obj any) {
	if svc := cachedServiceOf(obj); svc != nil {
		w.mu.Lock()
		w.svcGen++
		w.svcVIPs, w.svcVIPsOK = serviceVIPs{}, false
		w.mu.Unlock()
		if w.OnServiceChange != nil {
			w.OnServiceChange(svc.serviceName())
		}
		w.markService(svc.serviceName())
	}
}

func (w *Watcher) onSlice(obj any) {
	s := cachedSliceOf(obj)
	key, ok := s.serviceName()
	if !ok {
		return
	}
	if w.OnEndpointsChange != nil {
		w.OnEndpointsChange(key)
	}
	var api []netip.Addr
	if key == guard.APIServerService {
		api = convert.APIServerEndpoints(w.servicesSlices(key))
	}
	w.mu.Lock()
	w.dirty[key] = true
	w.noteSeen()
	apiChanged := key == guard.APIServerService && !slices.Equal(api, w.apiView)
	if apiChanged {
		// The guard protects them: every service is planned again.
		w.apiView = api
		w.nodesChg = true
	}
	if v := s.trigger; v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			if old, ok := w.triggers[key]; !ok || t.Before(old) {
				w.triggers[key] = t
			}
		}
	}
	w.mu.Unlock()
	if apiChanged && w.addrs != nil && w.slicesSynced() {
		if err := w.addrs.SetAPIServers(api); err != nil {
			w.log.Error("cannot write node address cache", zap.Error(err))
		}
	}
	w.signal()
}

func (w *Watcher) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	// Deleted nodes are no longer in the lister.
	_, err := w.nodeLister.Get(n.Name)
	gone := err != nil
	var addrs []netip.Addr
	if !gone {
		m, _ := convert.NodeFromObject(n)
		addrs = m.Addresses
	}
	var labelsChanged bool
	w.mu.Lock()
	old, had := w.nodeView[n.Name]
	addrsChanged := had == gone || !slices.Equal(old, addrs)
	if gone {
		delete(w.nodeView, n.Name)
	} else {
		w.nodeView[n.Name] = addrs
	}
	if n.Name == w.nodeName && !gone && !maps.Equal(w.localView, n.Labels) {
		w.localView = maps.Clone(n.Labels)
		labelsChanged = true
	}
	if cidrs := append(slices.Clip(n.Spec.PodCIDRs), n.Spec.PodCIDR); n.Name == w.nodeName && !gone && !slices.Equal(w.localCIDRs, cidrs) {
		w.localCIDRs = cidrs
		labelsChanged = true
	}
	if addrsChanged || labelsChanged {
		w.nodesChg = true
		w.noteSeen()
	}
	view := w.nodeViewCopy()
	w.mu.Unlock()
	if n.Name == w.nodeName && !gone && w.OnLocalNode != nil {
		w.OnLocalNode(n)
	}
	if addrsChanged && w.addrs != nil && w.nodesSynced() {
		if err := w.addrs.Set(view); err != nil {
			w.log.Error("cannot write node address cache", zap.Error(err))
		}
	}
	if addrsChanged || labelsChanged {
		w.signal()
	}
}

func (w *Watcher) nodeViewCopy() map[string][]netip.Addr {
	out := make(map[string][]netip.Addr, len(w.nodeView))
	for k, v := range w.nodeView {
		out[k] = v
	}
	return out
}

// APIServerEndpoints are the addresses of the cached default/kubernetes
// EndpointSlices (see the package function of the same name).
func (w *Watcher) APIServerEndpoints() []netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.apiView)
}

// noteSeen records the time of the first change not yet taken; w.mu is
// held.
func (w *Watcher) noteSeen() {
	if w.seen.IsZero() {
		w.seen = time.Now()
	}
}

// TakeChanges returns and clears what changed since the last call.
func (w *Watcher) TakeChanges() Changes {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.markNaming()
	c := Changes{Nodes: w.nodesChg, Triggers: w.triggers, Seen: w.seen}
	w.seen = time.Time{}
	c.Services = slices.SortedFunc(maps.Keys(w.dirty), model.CompareServices)
	w.dirty = map[types.NamespacedName]bool{}
	w.triggers = map[types.NamespacedName]time.Time{}
	w.nodesChg = false
	return c
}

// Requeue marks services changed again (a failed apply is retried).
func (w *Watcher) Requeue(keys []types.NamespacedName) {
	if len(keys) == 0 {
		return
	}
	w.mu.Lock()
	for _, k := range keys {
		w.dirty[k] = true
	}
	w.mu.Unlock()
	w.signal()
}

// Pending is the number of services changed and not yet taken.
func (w *Watcher) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.dirty)
}

// Service returns one Service's converted ports, endpoints and refusals
// from the caches. A Service that is gone or skipped (headless,
// ExternalName, another proxy's) gives no ports.
func (w *Watcher) Service(key types.NamespacedName) ([]model.ServicePort, map[model.ServicePortName][]model.Endpoint, []model.Refusal) {
	svc := w.ServiceObject(key.Namespace, key.Name)
	if svc == nil || convert.SkipReason(svc) != "" {
		return nil, nil, nil
	}
	cv := w.Converter
	cv.IsServiceIP, cv.IsLoadBalancerIP, cv.IsExternalVIP = w.IsServiceIP, w.IsLoadBalancerIP, w.IsExternalVIP
	ports, refusals := cv.ServicePorts(svc)
	if len(ports) == 0 {
		return nil, nil, refusals
	}
	eps, rs := cv.ServiceEndpoints(ports, w.servicesSlices(key))
	return ports, eps, append(refusals, rs...)
}

// fileSlice files an EndpointSlice event in bySvc: cur instead of old. A
// slice that leaves its Service (its service-name label changed) marks
// that Service changed too; onSlice marks the new one.
func (w *Watcher) fileSlice(old, cur any) {
	o, c := cachedSliceOf(old), cachedSliceOf(cur)
	w.mu.Lock()
	w.bySvc.move(o, c)
	was, had := o.serviceName()
	now, _ := c.serviceName()
	w.mu.Unlock()
	if had && c != nil && was != now {
		w.markService(was)
	}
}

// servicesSlices are the cached EndpointSlices of Service key, in no
// order, rebuilt for the conversion (cachedSlice.api).
func (w *Watcher) servicesSlices(key types.NamespacedName) []*discoveryv1.EndpointSlice {
	w.mu.Lock()
	cached := slices.Clone(w.bySvc[key])
	w.mu.Unlock()
	out := make([]*discoveryv1.EndpointSlice, len(cached))
	for i, c := range cached {
		out[i] = c.api()
	}
	return out
}

// ServiceObject returns the cached Service, rebuilt (cachedService.api),
// or nil.
func (w *Watcher) ServiceObject(namespace, name string) *corev1.Service {
	o, ok, err := w.svcInf.GetStore().GetByKey(cache.ObjectName{Namespace: namespace, Name: name}.String())
	if svc := cachedServiceOf(o); ok && err == nil && svc != nil {
		return svc.api()
	}
	return nil
}

// cachedServices are the cached Services.
func (w *Watcher) cachedServices() []*cachedService {
	objs := w.svcInf.GetStore().List()
	out := make([]*cachedService, 0, len(objs))
	for _, o := range objs {
		if svc := cachedServiceOf(o); svc != nil {
			out = append(out, svc)
		}
	}
	return out
}

// NodeObject returns the cached Node, or nil.
func (w *Watcher) NodeObject(name string) *corev1.Node {
	n, err := w.nodeLister.Get(name)
	if err != nil {
		return nil
	}
	return n
}

// ServiceNames lists every cached Service, sorted by namespace and name.
func (w *Watcher) ServiceNames() []types.NamespacedName {
	svcs := w.cachedServices()
	out := make([]types.NamespacedName, 0, len(svcs))
	for _, s := range svcs {
		out = append(out, s.serviceName())
	}
	slices.SortFunc(out, model.CompareServices)
	return out
}

// Nodes returns every cached Node converted and every deleted Node the
// node address cache still protects (NodeAddressCache.Remembered, LastSeen
// set), sorted by name, with the conversion's refusals, sorted.
func (w *Watcher) Nodes() ([]model.Node, []model.Refusal) {
	ns, _ := w.nodeLister.List(labels.Everything())
	out := make([]model.Node, 0, len(ns))
	var refusals []model.Refusal
	live := make(map[string]bool, len(ns))
	for _, n := range ns {
		m, rs := convert.NodeFromObject(n)
		out = append(out, m)
		refusals = append(refusals, rs...)
		live[n.Name] = true
	}
	if w.addrs != nil {
		for _, m := range w.addrs.Remembered() {
			if !live[m.Name] {
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b model.Node) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	slices.SortFunc(refusals, model.Refusal.Compare)
	return out, refusals
}

// Cluster converts the whole cache at once, as `plan` would convert the
// same objects.
func (w *Watcher) Cluster() model.Cluster {
	var svcs []*corev1.Service
	for _, s := range w.cachedServices() {
		svcs = append(svcs, s.api())
	}
	nodes, _ := w.nodeLister.List(labels.Everything())
	var eps []*discoveryv1.EndpointSlice
	w.mu.Lock()
	for _, ss := range w.bySvc {
		for _, s := range ss {
			eps = append(eps, s.api())
		}
	}
	w.mu.Unlock()
	return convert.Convert(svcs, eps, nodes)
}
