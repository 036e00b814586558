package convert

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// ServiceEndpoints gathers the endpoints of one Service's ports from that
// Service's EndpointSlices. Slice ports are matched to Service ports by name
// and protocol, so a named targetPort resolves per endpoint. Only slices of
// the Service's cluster IP families are used. An address that appears in
// several slices is taken from the first slice by name. Each port's
// endpoints are sorted by address and port.
func ServiceEndpoints(ports []model.ServicePort, eps []*discoveryv1.EndpointSlice) (map[model.ServicePortName][]model.Endpoint, []model.Refusal) {
	return Converter{}.ServiceEndpoints(ports, eps)
}

// ServiceEndpoints is the package function of the same name, capped at
// --max-real-servers-per-service (capRealServers): no more endpoints than
// the cap are ever built for one Service, whatever its slices hold.
func (cv Converter) ServiceEndpoints(ports []model.ServicePort, eps []*discoveryv1.EndpointSlice) (map[model.ServicePortName][]model.Endpoint, []model.Refusal) {
	if len(ports) == 0 {
		return nil, nil
	}
	cut, capRefusal := cv.capRealServers(ports, eps)
	var v4, v6 bool
	for _, a := range ports[0].ClusterIPs {
		v4 = v4 || a.Is4()
		v6 = v6 || a.Is6()
	}
	want := map[string]model.Protocol{}
	for _, p := range ports {
		want[p.Name.Port] = p.Protocol
	}

	eps = slices.Clone(eps)
	slices.SortFunc(eps, func(a, b *discoveryv1.EndpointSlice) int {
		if a == nil || b == nil {
			return cmp.Compare(boolInt(a != nil), boolInt(b != nil))
		}
		return cmp.Compare(a.Name, b.Name)
	})

	out := map[model.ServicePortName][]model.Endpoint{}
	var refusals []model.Refusal
	for _, s := range eps {
		if s == nil {
			continue
		}
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
			if !v4 {
				continue
			}
		case discoveryv1.AddressTypeIPv6:
			if !v6 {
				continue
			}
		default: // FQDN slices name no address IPVS can use.
			continue
		}
		got, rs := endpointsFromSlice(s, cut)
		refusals = append(refusals, rs...)
		for _, sp := range got {
			proto, ok := want[sp.Name]
			if !ok || proto != sp.Protocol {
				continue
			}
			if len(sp.Endpoints) == 0 {
				continue
			}
			key := model.ServicePortName{NamespacedName: ports[0].Name.NamespacedName, Port: sp.Name}
			if out[key] == nil {
				// The slice port's endpoints are this call's own: no copy.
				out[key] = sp.Endpoints
			} else {
				out[key] = append(out[key], sp.Endpoints...)
			}
		}
	}
	// Sorted stably, the first of equal endpoints is the first slice's by
	// name (then the first in that slice), and the only one kept.
	for key, es := range out {
		slices.SortStableFunc(es, func(a, b model.Endpoint) int {
			return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port))
		})
		out[key] = slices.CompactFunc(es, func(a, b model.Endpoint) bool { return a.Address == b.Address && a.Port == b.Port })
	}
	if capRefusal != nil {
		refusals = append(refusals, *capRefusal)
	}
	if cv.IsExternalVIP != nil {
		// Whether the address is a VIP or protected (a node's address that
		// k3s' servicelb writes as a LoadBalancer IP, say) is the guard's
		// to say: the planner refuses the marked endpoints it does not
		// protect.
		for _, es := range out {
			for i := range es {
				es[i].VIP = cv.IsExternalVIP(es[i].Address)
			}
		}
	}
	if cv.IsServiceIP != nil {
		for key, es := range out {
			out[key] = slices.DeleteFunc(es, func(e model.Endpoint) bool {
				if !cv.IsServiceIP(e.Address) {
					return false
				}
				refusals = append(refusals, model.Refusal{Subject: model.ServiceSubject(key.NamespacedName), Field: model.FieldEndpoint,
					Address: netip.AddrPortFrom(e.Address, e.Port).String(), Reason: model.ReasonServiceIP,
					Message: "the ClusterIP of a Service: a Service VIP is never a real server; endpoint not used, the others stay served"})
				return true
			})
			if len(out[key]) == 0 {
				delete(out, key)
			}
		}
	}
	return out, refusals
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SlicePort is what one port of one EndpointSlice contributes: the
// endpoints with that port's number.
type SlicePort struct {
	// Name is the slice port's name, matching the Service port's name.
	Name      string
	Protocol  model.Protocol
	Endpoints []model.Endpoint
}

// EndpointsFromSlice converts one EndpointSlice, without its Service: one
// SlicePort per valid slice port, each with every valid endpoint. Refusals
// name the Service of the slice (label kubernetes.io/service-name) and the
// field as "endpointSlice[NAME].endpoints[i].addresses[0]". Conditions are
// carried as the API defines them: ready nil means ready, serving nil means
// the same as ready, terminating nil means not terminating. Only the first
// address of an endpoint is used, as kube-proxy does.
func EndpointsFromSlice(s *discoveryv1.EndpointSlice) ([]SlicePort, []model.Refusal) {
	// A slice without its Service's name is refused as the Service "NS/".
	return endpointsFromSlice(s, nil)
}

// endpointsFromSlice is EndpointsFromSlice building no endpoints for the
// slice ports named in cut (the real-server cap's).
func endpointsFromSlice(s *discoveryv1.EndpointSlice, cut map[string]bool) ([]SlicePort, []model.Refusal) {
	if s == nil {
		return nil, nil
	}
	service, _ := SliceService(s)
	service.Namespace = s.Namespace
	r := &refuser{subject: model.ServiceSubject(service)}
	prefix := fmt.Sprintf("endpointSlice[%s]", s.Name)
	return slicePorts(r, s, prefix, sliceEndpoints(r, s, prefix), cut), r.out
}

// sliceEndpoints converts the slice's endpoints (without ports), refusing
// those with no usable address.
func sliceEndpoints(r *refuser, s *discoveryv1.EndpointSlice, prefix string) []model.Endpoint {
	ep := make([]model.Endpoint, 0, len(s.Endpoints))
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		if len(e.Addresses) == 0 {
			r.add(fmt.Sprintf("%s.endpoints[%d].addresses", prefix, i), "", model.ReasonInvalidEndpoint, "endpoint has no address; not used")
			continue
		}
		// Formatted only for a refusal: most endpoints have none.
		field := func() string { return fmt.Sprintf("%s.endpoints[%d].addresses[0]", prefix, i) }
		a, err := ParseAddr(e.Addresses[0])
		if err != nil {
			r.add(field(), e.Addresses[0], model.ReasonInvalidAddress, "not an IP address; endpoint not used")
			continue
		}
		if (s.AddressType == discoveryv1.AddressTypeIPv4) != a.Is4() {
			r.add(field(), e.Addresses[0], model.ReasonUnsupportedFamily,
				"address does not match the slice's addressType %q; endpoint not used", s.AddressType)
			continue
		}
		// The guard's never-a-VIP classes: addresses the API server itself
		// rejects (ValidateEndpointIP) and others no pod can have; a real
		// server there would send service traffic to the node or nowhere.
		if reason, why := guard.Special(a); reason != "" {
			r.add(field(), e.Addresses[0], reason, "%s; endpoint not used", why)
			continue
		}
		ep = append(ep, endpoint(a, e))
	}
	return ep
}

// endpoint is e at address a: its conditions (ready unless said otherwise;
// serving as ready unless said), node, zone and hints.
func endpoint(a netip.Addr, e *discoveryv1.Endpoint) model.Endpoint {
	ready := e.Conditions.Ready == nil || *e.Conditions.Ready
	serving := ready
	if e.Conditions.Serving != nil {
		serving = *e.Conditions.Serving
	}
	m := model.Endpoint{
		Address:     a,
		Ready:       ready,
		Serving:     serving,
		Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
	}
	if e.NodeName != nil {
		m.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		m.Zone = *e.Zone
	}
	if h := e.Hints; h != nil {
		for _, z := range h.ForZones {
			m.ZoneHints = append(m.ZoneHints, z.Name)
		}
		for _, n := range h.ForNodes {
			m.NodeHints = append(m.NodeHints, n.Name)
		}
	}
	return m
}

// slicePorts gives every valid port of the slice its own copy of ep (the
// last one ep itself), refusing the others; a port named in cut gets none.
func slicePorts(r *refuser, s *discoveryv1.EndpointSlice, prefix string, ep []model.Endpoint, cut map[string]bool) []SlicePort {
	var out []SlicePort
	var nums []uint16
	for i, p := range s.Ports {
		field := fmt.Sprintf("%s.ports[%d]", prefix, i)
		var name string
		if p.Name != nil {
			name = *p.Name
		}
		proto := model.TCP
		if p.Protocol != nil {
			var ok bool
			if proto, ok = convertProtocol(*p.Protocol); !ok {
				r.add(field+".protocol", string(*p.Protocol), model.ReasonInvalidProtocol,
					"must be TCP, UDP or SCTP; slice port not used")
				continue
			}
		}
		if p.Port == nil {
			r.add(field+".port", "", model.ReasonInvalidPort, "no port number; slice port not used")
			continue
		}
		if !validPort(*p.Port) {
			r.add(field+".port", strconv.Itoa(int(*p.Port)), model.ReasonInvalidPort,
				"must be 1-65535; slice port not used")
			continue
		}
		out = append(out, SlicePort{Name: name, Protocol: proto})
		nums = append(nums, uint16(*p.Port))
	}
	for k, port := range nums {
		if cut[out[k].Name] {
			continue
		}
		eps := ep
		if k < len(out)-1 {
			eps = make([]model.Endpoint, len(ep))
			for j, e := range ep {
				e.ZoneHints = slices.Clone(e.ZoneHints)
				e.NodeHints = slices.Clone(e.NodeHints)
				eps[j] = e
			}
		}
		for j := range eps {
			eps[j].Port = port
		}
		out[k].Endpoints = eps
	}
	return out
}
