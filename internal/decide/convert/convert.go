// The conversion of API objects into the model: validate every field used,
// refuse what cannot be used (model.Refusal), never panic.

package convert

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	netutils "k8s.io/utils/net"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Well-known labels and annotations the conversion reads.
const (
	// LabelServiceName ties an EndpointSlice to its Service.
	LabelServiceName = discoveryv1.LabelServiceName
	// LabelServiceProxyName marks a Service handled by another proxy; such
	// Services are skipped, as kube-proxy does.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// AnnotationScheduler overrides --ipvs-scheduler for one Service.
	AnnotationScheduler = "ipvs-proxy.io/scheduler"
	// AnnotationSchedulerFlags names the scheduler's flags for one
	// Service instead of the scheduler's defaults.
	AnnotationSchedulerFlags = "ipvs-proxy.io/scheduler-flags"
	// AnnotationSourceRanges is the legacy form of
	// spec.loadBalancerSourceRanges, used when the field is empty.
	AnnotationSourceRanges = corev1.AnnotationLoadBalancerSourceRangesKey
)

// Session affinity timeouts, as the API server defaults and bounds them.
const (
	DefaultAffinityTimeout = 10800
	MaxAffinityTimeout     = 86400
)

// Convert is Converter{}.Convert: the default limits.
func Convert(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node) model.Cluster {
	return Converter{}.Convert(svcs, eps, nodes)
}

// Convert is the whole-cluster conversion: every Service port, its
// endpoints from the EndpointSlices labelled with the Service's name, and
// every Node. Nil objects are ignored. The result is sorted and
// deterministic whatever the input order.
func (cv Converter) Convert(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node) model.Cluster {
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}}
	if cv.IsServiceIP == nil {
		cv.IsServiceIP = ServiceIPs(svcs).Contains
	}
	if cv.IsLoadBalancerIP == nil {
		cv.IsLoadBalancerIP = LoadBalancerIPs(svcs).Contains
	}
	if cv.IsExternalVIP == nil {
		cv.IsExternalVIP = ExternalVIPs(svcs).Contains
	}

	byService := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		if n, ok := SliceService(s); ok {
			byService[n] = append(byService[n], s)
		}
	}
	for _, svc := range svcs {
		ports, refusals := cv.ServicePorts(svc)
		c.Refusals = append(c.Refusals, refusals...)
		if len(ports) == 0 {
			continue
		}
		c.Services = append(c.Services, ports...)
		m, refusals := cv.ServiceEndpoints(ports, byService[ports[0].Name.NamespacedName])
		c.Refusals = append(c.Refusals, refusals...)
		for k, v := range m {
			c.Endpoints[k] = v
		}
	}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		node, refusals := NodeFromObject(n)
		c.Nodes = append(c.Nodes, node)
		c.Refusals = append(c.Refusals, refusals...)
	}

	slices.SortFunc(c.Services, func(a, b model.ServicePort) int { return a.Name.Compare(b.Name) })
	slices.SortFunc(c.Nodes, func(a, b model.Node) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(c.Refusals, model.Refusal.Compare)
	return c
}

// ServiceName is the namespace and name of a Service.
func ServiceName(svc *corev1.Service) types.NamespacedName {
	return types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
}

// SliceService is the namespace and name of the Service an EndpointSlice
// belongs to (label kubernetes.io/service-name); false when it has none.
func SliceService(s *discoveryv1.EndpointSlice) (types.NamespacedName, bool) {
	if s == nil || s.Labels[LabelServiceName] == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[LabelServiceName]}, true
}

// SkipReason says why the proxy ignores a Service altogether, or "" when it
// does not. Skipped Services are not refusals: nothing is wrong with them,
// they are simply not for an IPVS proxy (as kube-proxy's ShouldSkipService).
func SkipReason(svc *corev1.Service) string {
	switch {
	case svc == nil:
		return "nil Service"
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "type ExternalName"
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "headless (clusterIP None)"
	}
	if name, ok := svc.Labels[LabelServiceProxyName]; ok {
		return fmt.Sprintf("label %s=%q: handled by another proxy", LabelServiceProxyName, name)
	}
	return ""
}

// refuser collects the refusals of one Service.
type refuser struct {
	subject model.Subject
	out     []model.Refusal
}

// add records one refusal. The value is kept as written; every text
// layout renders it through model.Word, so an empty or odd value cannot
// add a word or a line.
func (r *refuser) add(field, value string, reason model.Reason, format string, args ...any) {
	r.out = append(r.out, model.Refusal{
		Subject: r.subject,
		Field:   field,
		Address: value,
		Reason:  reason,
		Message: fmt.Sprintf(format, args...),
	})
}

// Refusal field paths name the list for address lists (spec.externalIPs,
// as the planner does: the value identifies the entry) and the index for
// ports (spec.ports[2].protocol).

// ParseAddr parses one IP address as the API carries it: no zone, no
// surrounding junk. IPv4-mapped IPv6 addresses are kept as written; the
// guard refuses them. An IPv4 address with leading-zero octets
// ("10.96.0.011") reads as decimal (10.96.0.11), as the API server's
// allocator and kube-proxy (netutils.ParseIPSloppy) read it: the API
// server accepts the form (objects from before its strict validation, and
// v1.34 still takes it at create), so refusing it would leave a Service
// Kubernetes considers valid without its proxy. The address is then
// checked by the guard like any other.
func ParseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		if d, ok := parseLeadingZeros(s); ok {
			return d, nil
		}
		return netip.Addr{}, err
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("ParseAddr(%q): zone not allowed", s)
	}
	return a, nil
}

// parseLeadingZeros reads a dotted-quad IPv4 address whose octets may
// carry leading zeros, as decimal; only digits and three dots qualify (no
// white space, zone or IPv6).
func parseLeadingZeros(s string) (netip.Addr, bool) {
	if strings.Count(s, ".") != 3 || strings.Trim(s, "0123456789.") != "" {
		return netip.Addr{}, false
	}
	ip := netutils.ParseIPSloppy(s).To4()
	if ip == nil {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte(ip)), true
}
