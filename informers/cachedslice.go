package informers

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"net/netip"
	"slices"
	"strings"
	"unique"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachedSlice is what the EndpointSlice informer's cache keeps of one
// EndpointSlice (`kubectl get endpointslice -o yaml`, reduced to what the
// conversion reads): the identity, the Service it belongs to (label
// kubernetes.io/service-name), the trigger-time annotation, the address
// type, the ports and, of every endpoint in order, its first address, its
// conditions in one byte, and its node name, zone and hints (one shared
// endpointTopology per node and zone). It replaces the lean
// discoveryv1.EndpointSlice: an endpoint costs 16 B here (an IPv4 address
// in its 4 bytes) against 96 B, a one-element address list and the
// address string there, and the Service's name a string against a label
// map (see BenchmarkInformerCacheMemory).
//
// The conversion (EndpointsFromSlice, ServiceEndpoints, Convert) reads API
// objects; api rebuilds one, holding every field it reads, for as long as
// a sync converts the Service. Like every informer cache entry it is
// read-only: the rebuilt object shares its ports and strings.
type cachedSlice struct {
	// objectID is the store's key and the names a refusal gives.
	objectID
	service string
	trigger string
	// addressType is interned: a handle is 8 B against a string's 16, which
	// keeps the struct in the 160 B size class with addresses.
	addressType unique.Handle[string]
	ports       []discoveryv1.EndpointPort
	endpoints   []cachedEndpoint
	// addresses are the endpoints' first addresses (of those with
	// hasAddress), in order, when any of them is not an IPv4 address in
	// its canonical text (an IPv6 slice, an invalid address); nil when
	// every one is in its endpoint's ip4.
	addresses []string
}

// cachedEndpoint is one endpoint of a cachedSlice.
type cachedEndpoint struct {
	topo *endpointTopology
	// ip4 is the first of the endpoint's addresses (hasAddress set) when
	// the slice has no addresses: an IPv4 address, whose canonical text it
	// formats back to.
	ip4   [4]byte
	flags endpointFlags
}

// endpointTopology is where an endpoint runs and which zones and nodes it
// serves: the endpoints of one node and zone without hints share one.
type endpointTopology struct {
	nodeName, zone *string
	hints          *discoveryv1.EndpointHints
}

// topoKey is what an interned endpointTopology is found by.
type topoKey struct {
	nodeName, zone string
	hasNode        bool
	hasZone        bool
}

// topology returns an endpointTopology of e's node, zone and hints: shared
// between endpoints without hints, a new one for an endpoint with hints.
func (l *leaner) topology(e *discoveryv1.Endpoint) *endpointTopology {
	if e.Hints != nil || !l.intern {
		return &endpointTopology{nodeName: l.ptr(e.NodeName), zone: l.ptr(e.Zone), hints: e.Hints}
	}
	k := topoKey{hasNode: e.NodeName != nil, hasZone: e.Zone != nil}
	if k.hasNode {
		k.nodeName = *e.NodeName
	}
	if k.hasZone {
		k.zone = *e.Zone
	}
	l.mu.Lock()
	t, ok := l.topos[k]
	l.mu.Unlock()
	if ok {
		return t
	}
	t = &endpointTopology{nodeName: l.ptr(e.NodeName), zone: l.ptr(e.Zone)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.topos) >= maxInterned {
		clear(l.topos)
	}
	l.topos[k] = t
	return t
}

// endpointFlags are an endpoint's conditions, each unset, true or false as
// the API carries it, and whether it has an address.
type endpointFlags uint8

const (
	hasAddress endpointFlags = 1 << iota
	readySet
	ready
	servingSet
	serving
	terminatingSet
	terminating
)

// condFlags packs one condition: set when p is not nil, val when *p.
func condFlags(p *bool, set, val endpointFlags) endpointFlags {
	switch {
	case p == nil:
		return 0
	case *p:
		return set | val
	}
	return set
}

// cond unpacks one condition as the shared pointers boolPtr gives.
func (f endpointFlags) cond(set, val endpointFlags) *bool {
	switch {
	case f&set == 0:
		return nil
	case f&val != 0:
		return &boolTrue
	}
	return &boolFalse
}

// slice keeps what EndpointsFromSlice reads (see cachedSlice). Target
// references, hostnames, deprecated topology, app protocols, every label
// but the Service's name and every annotation but the trigger time go.
func (l *leaner) slice(s *discoveryv1.EndpointSlice) *cachedSlice {
	out := &cachedSlice{objectID: l.idOf(&s.ObjectMeta), service: s.Labels[convert.LabelServiceName],
		trigger: s.Annotations[AnnotationTriggerTime], addressType: unique.Make(string(s.AddressType))}
	if len(s.Ports) > 0 {
		out.ports = make([]discoveryv1.EndpointPort, len(s.Ports))
		for i, p := range s.Ports {
			out.ports[i] = discoveryv1.EndpointPort{Name: l.ptr(p.Name), Protocol: protoPtr(p.Protocol), Port: p.Port}
		}
	}
	if len(s.Endpoints) == 0 {
		return out
	}
	out.endpoints = make([]cachedEndpoint, len(s.Endpoints))
	inline := true
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		c := cachedEndpoint{topo: l.topology(e),
			flags: condFlags(e.Conditions.Ready, readySet, ready) |
				condFlags(e.Conditions.Serving, servingSet, serving) |
				condFlags(e.Conditions.Terminating, terminatingSet, terminating)}
		if len(e.Addresses) > 0 {
			c.flags |= hasAddress
			var ok bool
			if c.ip4, ok = canonicalIPv4(e.Addresses[0]); !ok {
				inline = false
			}
		}
		out.endpoints[i] = c
	}
	if !inline {
		// Rare (IPv6 slices keep their strings, as before): every address
		// of the slice is kept as text, so that the endpoints need no mark.
		out.addresses = make([]string, 0, len(s.Endpoints))
		for i := range s.Endpoints {
			if as := s.Endpoints[i].Addresses; len(as) > 0 {
				out.addresses = append(out.addresses, as[0])
			}
		}
	}
	return out
}

// maxIPv4Text is the length of the longest IPv4 address text.
const maxIPv4Text = len("255.255.255.255")

// canonicalIPv4 is s's 4 bytes when s is an IPv4 address in its canonical
// text, the one netip formats it back to (so that api rebuilds the very
// string); false for any other string.
func canonicalIPv4(s string) ([4]byte, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return [4]byte{}, false
	}
	var b [maxIPv4Text]byte
	if string(a.AppendTo(b[:0])) != s {
		return [4]byte{}, false
	}
	return a.As4(), true
}

// ipv4Texts is the text of every inline address of eps (hasAddress), in
// order, in one string: one allocation for the slice's addresses.
func ipv4Texts(eps []cachedEndpoint) string {
	var sb strings.Builder
	sb.Grow(len(eps) * maxIPv4Text)
	var b [maxIPv4Text]byte
	for _, e := range eps {
		if e.flags&hasAddress != 0 {
			sb.Write(netip.AddrFrom4(e.ip4).AppendTo(b[:0]))
		}
	}
	return sb.String()
}

// api rebuilds the EndpointSlice the conversion reads: the identity (name,
// namespace, resourceVersion; not the UID, which nothing reads), the
// service-name label, the address type, the ports and every endpoint with
// its first address. It shares the ports, strings and hints of c; the
// IPv4 addresses kept inline are formatted again, into one string.
func (c *cachedSlice) api() *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{ObjectMeta: c.objectMeta(), AddressType: discoveryv1.AddressType(c.addressType.Value()),
		Ports: c.ports}
	if c.service != "" {
		out.Labels = map[string]string{convert.LabelServiceName: c.service}
	}
	if len(c.endpoints) == 0 {
		return out
	}
	out.Endpoints = make([]discoveryv1.Endpoint, len(c.endpoints))
	addrs := make([]string, len(c.endpoints)) // one array for the one-element lists
	// The addresses as text, taken in order: the kept ones, or else the
	// inline ones' texts in one string (next is where the next one starts).
	kept, texts, next := c.addresses, "", 0
	if kept == nil {
		texts = ipv4Texts(c.endpoints)
	}
	var b [maxIPv4Text]byte
	for i, e := range c.endpoints {
		ep := discoveryv1.Endpoint{
			Conditions: discoveryv1.EndpointConditions{
				Ready:       e.flags.cond(readySet, ready),
				Serving:     e.flags.cond(servingSet, serving),
				Terminating: e.flags.cond(terminatingSet, terminating),
			},
			NodeName: e.topo.nodeName,
			Zone:     e.topo.zone,
			Hints:    e.topo.hints,
		}
		if e.flags&hasAddress != 0 {
			if kept != nil {
				addrs[i], kept = kept[0], kept[1:]
			} else {
				n := len(netip.AddrFrom4(e.ip4).AppendTo(b[:0]))
				addrs[i], next = texts[next:next+n], next+n
			}
			ep.Addresses = addrs[i : i+1 : i+1]
		}
		out.Endpoints[i] = ep
	}
	return out
}

// cachedSliceOf is the cachedSlice of an informer's object: the
// transform's own, or a new one of an API object (an informer without the
// transform), or nil.
func cachedSliceOf(obj any) *cachedSlice {
	switch o := obj.(type) {
	case *cachedSlice:
		return o
	case *discoveryv1.EndpointSlice:
		if o != nil {
			return defaultLeaner.slice(o)
		}
	}
	return nil
}

// GetObjectKind is runtime.Object's: a cachedSlice carries no type meta.
func (c *cachedSlice) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is runtime.Object's (client-go's mutation detector and
// PagedList's list need one).
func (c *cachedSlice) DeepCopyObject() runtime.Object {
	out := *c
	if c.ports != nil {
		out.ports = make([]discoveryv1.EndpointPort, len(c.ports))
		for i := range c.ports {
			c.ports[i].DeepCopyInto(&out.ports[i])
		}
	}
	if c.endpoints != nil {
		out.endpoints = make([]cachedEndpoint, len(c.endpoints))
		for i, e := range c.endpoints {
			t := *e.topo
			if t.nodeName != nil {
				n := *t.nodeName
				t.nodeName = &n
			}
			if t.zone != nil {
				z := *t.zone
				t.zone = &z
			}
			t.hints = t.hints.DeepCopy()
			e.topo = &t
			out.endpoints[i] = e
		}
	}
	out.addresses = slices.Clone(c.addresses)
	return &out
}

var _ runtime.Object = (*cachedSlice)(nil)

// serviceName is SliceService of the slice c was made of; false for nil.
func (c *cachedSlice) serviceName() (types.NamespacedName, bool) {
	if c == nil || c.service == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: c.namespace, Name: c.service}, true
}
