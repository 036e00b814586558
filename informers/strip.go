package informers

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the lean copies keep of labels and annotations. Everything the proxy
// reads from a cached object is listed here or copied in lean*, and
// TestStripUnusedConverts checks that the conversion cannot tell a lean copy
// from the original: a new read of a cached field must be added here.
var (
	// Services: SkipReason reads the proxy-name label; the headless label
	// is the other half of the informers' selector.
	serviceLabels      = []string{convert.LabelServiceProxyName, LabelHeadless}
	serviceAnnotations = []string{convert.AnnotationScheduler, convert.AnnotationSourceRanges}
	// EndpointSlices are cachedSlices: of their labels the Service's name
	// (SliceService, the slice index), of their annotations the trigger
	// time (onSlice).
	// Nodes keep every label (the planner reads the zone, the local node's
	// labels are compared as a whole) and no annotation.
)

// StripUnused is the informers' transform: it replaces each Node by a lean
// copy holding only what the proxy reads (see leaner.node), and each
// Service and EndpointSlice by the proxy's own cachedService and
// cachedSlice, before the cache keeps it, so
// that the decoded original — managedFields, last-applied-configuration,
// selectors, targetRefs, a Node's images and conditions, and the spare
// capacity of decoded lists — can be freed. The copies share their strings
// and small leaf values with the original and with each other (node names,
// zones, namespaces and label keys are interned): like every informer
// cache, they are read-only. The original is never modified. Other objects
// and tombstones pass unchanged. A lean copy passes unchanged too (see
// leanMark; a cachedService or cachedSlice is no API object): client-go applies the
// transform twice to every object of an initial list — watch-list's temporary store or the paged list
// (PagedList), then the informer's FIFO — and a second copy would double
// the caches for as long as the first is not yet garbage.
func StripUnused(obj any) (any, error) { return defaultLeaner.transform(obj) }

// leanMark is the managedFields of every lean copy: an empty list (what a
// reader of the field sees, as when there are none) whose array is this
// one, so that the transform knows its own copies by address. A decoded
// object has nil or its own array; DeepCopy allocates a new one.
var leanMark = make([]metav1.ManagedFieldsEntry, 0, 1)

// isLean reports whether m is the metadata of a lean copy.
func isLean(m *metav1.ObjectMeta) bool {
	return cap(m.ManagedFields) == cap(leanMark) && len(m.ManagedFields) == 0 &&
		&m.ManagedFields[:1][0] == &leanMark[:1][0]
}

var defaultLeaner = newLeaner(true)

// leaner builds lean copies, interning the strings that repeat across
// objects.
type leaner struct {
	intern bool

	mu    sync.Mutex
	ptrs  map[string]*string
	topos map[topoKey]*endpointTopology
}

// maxInterned bounds the table of shared pointers: past it the table starts
// again (objects keep their pointers; only sharing with later objects is
// lost), so node names of long-gone nodes cannot pile up.
const maxInterned = 1 << 14

func newLeaner(intern bool) *leaner {
	return &leaner{intern: intern, ptrs: map[string]*string{}, topos: map[topoKey]*endpointTopology{}}
}

func (l *leaner) transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		if o != nil {
			return l.service(o), nil
		}
	case *discoveryv1.EndpointSlice:
		if o != nil {
			return l.slice(o), nil
		}
	case *corev1.Node:
		if o != nil && !isLean(&o.ObjectMeta) {
			return l.node(o), nil
		}
	}
	return obj, nil
}

// str returns the interned copy of s (unique.Make: the copies are shared
// while any object holds them, and freed after).
func (l *leaner) str(s string) string {
	if !l.intern || s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// ptr returns a shared pointer to a string equal to *p.
func (l *leaner) ptr(p *string) *string {
	if !l.intern || p == nil {
		return p
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.ptrs[*p]; ok {
		return c
	}
	if len(l.ptrs) >= maxInterned {
		clear(l.ptrs)
	}
	l.ptrs[*p] = p
	return p
}

var (
	boolTrue, boolFalse           = true, false
	protoTCP, protoUDP, protoSCTP = corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
)

// boolPtr shares the pointers of the endpoint conditions.
func boolPtr(p *bool) *bool {
	switch {
	case p == nil:
		return nil
	case *p:
		return &boolTrue
	}
	return &boolFalse
}

// protoPtr shares the pointers of the usual protocols.
func protoPtr(p *corev1.Protocol) *corev1.Protocol {
	if p == nil {
		return nil
	}
	switch *p {
	case corev1.ProtocolTCP:
		return &protoTCP
	case corev1.ProtocolUDP:
		return &protoUDP
	case corev1.ProtocolSCTP:
		return &protoSCTP
	}
	return p
}

// keep returns a new map with only the keys of m in want, nil when there
// are none. Its keys are the package's constants, not the decoded strings.
func keep(m map[string]string, want []string) map[string]string {
	n := 0
	for _, k := range want {
		if _, ok := m[k]; ok {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	for _, k := range want {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// meta keeps what identifies an object and what the informers need of it:
// name, namespace, UID (Events name it), resourceVersion, generation, the
// timestamps; labels and annotations as the caller filters them. Owner
// references, finalizers and managedFields go: the copy's managedFields
// are leanMark.
func (l *leaner) meta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		ManagedFields:     leanMark,
		Name:              m.Name,
		Namespace:         l.str(m.Namespace),
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
	}
}

// node keeps what NodeFromObject and the health server read: every label,
// the deletion timestamp, the pod CIDRs, unschedulable and the taints, and
// every entry of status.addresses (all of them, in order: refusals name
// them by index). Annotations, provider ID, capacity, conditions, images,
// volumes and system info go.
func (l *leaner) node(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: l.meta(&n.ObjectMeta)}
	out.Labels = n.Labels
	if l.intern && len(n.Labels) > 0 {
		out.Labels = make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			out.Labels[l.str(k)] = l.str(v)
		}
	}
	out.Spec.PodCIDR = n.Spec.PodCIDR
	out.Spec.PodCIDRs = n.Spec.PodCIDRs
	out.Spec.Unschedulable = n.Spec.Unschedulable
	out.Spec.Taints = n.Spec.Taints
	out.Status.Addresses = n.Status.Addresses
	return out
}
