package informers

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"net/netip"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachedService is what the Service informer's cache keeps of one Service
// (`kubectl get service -o yaml`, reduced to what ServicePorts and
// SkipReason read): the identity, the labels and annotations the proxy
// reads, type, cluster IPs, external IPs, source ranges, traffic policies,
// health check node port, session affinity, traffic distribution, each
// port's name, protocol, port and node port, the load balancer ingress IPs
// and IP modes. The selector, IP family fields, target ports, app
// protocols, ingress hostnames and ports, and status conditions go. 160 B
// against the 592 B corev1.Service and its 80 B ports (see
// BenchmarkInformerCacheMemory),
// and 128 B more for a Service with any of the fields most Services leave
// unset (serviceExtras: a NodePort or LoadBalancer Service's, say).
//
// The conversion reads API objects; api rebuilds one for as long as a sync
// converts the Service or an Event names it. Like every informer cache
// entry it is read-only: the rebuilt object shares its lists and strings.
type cachedService struct {
	objectID
	// uid is the Service's: Events name it (Watcher.ServiceObject).
	uid types.UID
	// created is metadata.creationTimestamp in Unix seconds (its
	// precision in the API): the oldest Service wins an address claimed
	// twice (model.ServicePort.Created).
	created int64
	// typ and affinity are interned: a handle is 8 B against a string's 16.
	typ, affinity unique.Handle[string]
	clusterIP     string
	clusterIPs    []string
	// itp is one of the package's pointers for Cluster and Local.
	itp   *corev1.ServiceInternalTrafficPolicy
	ports []cachedServicePort
	// extras are the fields most Services leave unset; nil when all are.
	extras *serviceExtras
}

// serviceExtras are the fields of a cachedService that a ClusterIP Service
// without labels or annotations the proxy reads leaves unset: kept apart,
// so that such a Service does not carry them.
type serviceExtras struct {
	labels, annotations map[string]string
	externalIPs         []string
	sourceRanges        []string
	etp                 corev1.ServiceExternalTrafficPolicy
	affinityConfig      *corev1.SessionAffinityConfig
	trafficDistribution *string
	ingress             []corev1.LoadBalancerIngress
	healthCheckNodePort int32
}

// noExtras are a Service's extras when it has none.
var noExtras serviceExtras

// cachedServicePort is one port of a cachedService.
type cachedServicePort struct {
	name           string
	protocol       corev1.Protocol
	port, nodePort int32
}

// service keeps what ServicePorts and SkipReason read (see cachedService);
// the strings every Service repeats (type, policies, protocols, port
// names, namespace) are interned.
func (l *leaner) service(s *corev1.Service) *cachedService {
	sp := &s.Spec
	out := &cachedService{
		objectID:   l.idOf(&s.ObjectMeta),
		uid:        s.UID,
		created:    s.CreationTimestamp.Unix(),
		typ:        unique.Make(string(sp.Type)),
		clusterIP:  sp.ClusterIP,
		clusterIPs: sp.ClusterIPs,
		itp:        itpPtr(sp.InternalTrafficPolicy),
		affinity:   unique.Make(string(sp.SessionAffinity)),
	}
	if len(sp.ClusterIPs) > 0 && sp.ClusterIPs[0] == sp.ClusterIP {
		out.clusterIP = sp.ClusterIPs[0] // one string, not two equal ones
	}
	if len(sp.Ports) > 0 {
		out.ports = make([]cachedServicePort, len(sp.Ports))
		for i, p := range sp.Ports {
			out.ports[i] = cachedServicePort{name: l.str(p.Name), protocol: corev1.Protocol(l.str(string(p.Protocol))), port: p.Port, nodePort: p.NodePort}
		}
	}
	x := serviceExtras{
		labels:              keep(s.Labels, labelsKept(s.Namespace)),
		annotations:         keep(s.Annotations, serviceAnnotations),
		externalIPs:         sp.ExternalIPs,
		sourceRanges:        sp.LoadBalancerSourceRanges,
		etp:                 corev1.ServiceExternalTrafficPolicy(l.str(string(sp.ExternalTrafficPolicy))),
		affinityConfig:      sp.SessionAffinityConfig,
		trafficDistribution: l.ptr(sp.TrafficDistribution),
		healthCheckNodePort: sp.HealthCheckNodePort,
	}
	if ing := s.Status.LoadBalancer.Ingress; len(ing) > 0 {
		x.ingress = make([]corev1.LoadBalancerIngress, len(ing))
		for i, in := range ing {
			x.ingress[i] = corev1.LoadBalancerIngress{IP: in.IP, IPMode: in.IPMode}
		}
	}
	if !x.none() {
		out.extras = &x
	}
	return out
}

// none reports whether every field of x is unset (nil or empty: what the
// rebuilt Service gets from noExtras is the same to every reader).
func (x *serviceExtras) none() bool {
	return x.labels == nil && x.annotations == nil && x.externalIPs == nil && x.sourceRanges == nil && x.etp == "" &&
		x.affinityConfig == nil && x.trafficDistribution == nil && x.ingress == nil && x.healthCheckNodePort == 0
}

// more are c's extras, noExtras when it has none.
func (c *cachedService) more() *serviceExtras {
	if c.extras == nil {
		return &noExtras
	}
	return c.extras
}

var itpCluster, itpLocal = corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal

// itpPtr shares the pointers of the internal traffic policies the API
// knows (every Service of a cluster has one, defaulted to Cluster).
func itpPtr(p *corev1.ServiceInternalTrafficPolicy) *corev1.ServiceInternalTrafficPolicy {
	switch {
	case p == nil:
		return nil
	case *p == itpCluster:
		return &itpCluster
	case *p == itpLocal:
		return &itpLocal
	}
	return p
}

// api rebuilds the Service the conversion reads, and Events (its UID). It
// shares the lists, maps and strings of c.
func (c *cachedService) api() *corev1.Service {
	out := &corev1.Service{ObjectMeta: c.objectMeta()}
	out.UID = c.uid
	if c.created != (metav1.Time{}).Unix() {
		out.CreationTimestamp = metav1.Unix(c.created, 0)
	}
	x := c.more()
	out.Labels, out.Annotations = x.labels, x.annotations
	out.Spec = corev1.ServiceSpec{
		Type:                     corev1.ServiceType(c.typ.Value()),
		ClusterIP:                c.clusterIP,
		ClusterIPs:               c.clusterIPs,
		ExternalIPs:              x.externalIPs,
		LoadBalancerSourceRanges: x.sourceRanges,
		ExternalTrafficPolicy:    x.etp,
		InternalTrafficPolicy:    c.itp,
		HealthCheckNodePort:      x.healthCheckNodePort,
		SessionAffinity:          corev1.ServiceAffinity(c.affinity.Value()),
		SessionAffinityConfig:    x.affinityConfig,
		TrafficDistribution:      x.trafficDistribution,
	}
	if len(c.ports) > 0 {
		out.Spec.Ports = make([]corev1.ServicePort, len(c.ports))
		for i, p := range c.ports {
			out.Spec.Ports[i] = corev1.ServicePort{Name: p.name, Protocol: p.protocol, Port: p.port, NodePort: p.nodePort}
		}
	}
	out.Status.LoadBalancer.Ingress = x.ingress
	return out
}

// GetUID is metav1.Object's: a cachedService keeps its UID (objectID
// does not).
func (c *cachedService) GetUID() types.UID { return c.uid }

// serviceName is the Service's namespace and name (ServiceName).
func (c *cachedService) serviceName() types.NamespacedName {
	return types.NamespacedName{Namespace: c.namespace, Name: c.name}
}

// serviceIPs are the Service's ClusterIPs that parse (clusterIPsOf).
func (c *cachedService) serviceIPs() []netip.Addr {
	return convert.ParseClusterIPs(c.clusterIP, c.clusterIPs)
}

// cachedServiceOf is the cachedService of an informer's object: the
// transform's own, or a new one of an API object (an informer without the
// transform), or nil.
func cachedServiceOf(obj any) *cachedService {
	switch o := obj.(type) {
	case *cachedService:
		return o
	case *corev1.Service:
		if o != nil {
			return defaultLeaner.service(o)
		}
	}
	return nil
}

// GetObjectKind is runtime.Object's: a cachedService carries no type meta.
func (c *cachedService) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is runtime.Object's (client-go's mutation detector and
// PagedList's list need one): the rebuilt Service's deep copy, cached again.
func (c *cachedService) DeepCopyObject() runtime.Object {
	return (&leaner{}).service(c.api().DeepCopy())
}

var _ runtime.Object = (*cachedService)(nil)
