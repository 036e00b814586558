package informers_test

// Fuzz targets for the conversion of API objects into the model: whatever a
// Service, EndpointSlice or Node holds, Convert must not panic, must give
// the same answer twice and whatever the input order, must hand the planner
// only valid data, and must turn every unusable field into a refusal rather
// than drop it silently. The converted cluster is then planned, and no
// protected address may be planned for kube-ipvs0.
//
// Run one with `go test -run '^$' -fuzz '^FuzzConvertFields$' ./informers/`
// (or `make reliability`); the seed corpus is testdata/fuzz/FuzzX.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// Pools the byte stream picks from: ordinary values, the boundaries, and
// what a hostile or broken client could write.
var (
	fzAddrs = []string{
		"10.96.0.10", "10.96.0.11", "fd00:96::10", "192.0.2.10", "198.51.100.1", "198.51.100.2", "2001:db8:100::1",
		"10.244.1.5", "fd00:244::5", "", " 10.96.0.12", "10.96.0.13 ", "256.1.1.1", "10.96.0.14/32", "None",
		"0.0.0.0", "::", "127.0.0.1", "::1", "224.0.0.1", "ff02::1", "255.255.255.255", "169.254.169.254",
		"fe80::1%eth0", "fe80::1", "::ffff:10.96.0.10", "010.096.000.010", "1.2.3", "x\x00y", "10.96.0.10\n",
	}
	fzPorts      = []int32{80, 443, 53, 1, 65535, 0, -1, 65536, 1 << 30, 30080, 30081, 8080}
	fzProtos     = []corev1.Protocol{"", "TCP", "UDP", "SCTP", "tcp", "ICMP", " TCP"}
	fzTypes      = []corev1.ServiceType{"", "ClusterIP", "NodePort", "LoadBalancer", "ExternalName", "Weird"}
	fzPolicies   = []string{"", "Cluster", "Local", "local", "Bogus"}
	fzAffinity   = []corev1.ServiceAffinity{"", "None", "ClientIP", "clientip"}
	fzTimeouts   = []int32{0, -1, 1, 10800, 86400, 86401, 1 << 30}
	fzNames      = []string{"", "http", "dns", "HTTP", "a b", "p\x01"}
	fzNodeNames  = []string{"", "n1", "n2", "n3"}
	fzRanges     = []string{"0.0.0.0/0", "192.0.2.0/24", "10.0.0.1/8", "bad", "", "::/0", "fe80::/10%eth0", " 203.0.113.0/24 "}
	fzAddrTypes  = []discoveryv1.AddressType{"IPv4", "IPv6", "FQDN", ""}
	fzSchedulers = []string{"", "rr", "mh", " sh ", "bogus"}
)

// stream reads small integers from fuzz data; past the end it reads zeros.
type stream struct {
	b []byte
	i int
}

func (s *stream) n(mod int) int {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return int(s.b[s.i-1]) % mod
}

func pick[T any](s *stream, pool []T) T { return pool[s.n(len(pool))] }

func (s *stream) optBool() *bool {
	switch s.n(3) {
	case 1:
		return new(true)
	case 2:
		return new(false)
	}
	return nil
}

// objectsFromBytes builds Services, EndpointSlices and Nodes from data:
// deterministic in data, with unique object names, as the API guarantees.
func objectsFromBytes(data []byte) ([]*corev1.Service, []*discoveryv1.EndpointSlice, []*corev1.Node) {
	s := &stream{b: data}
	var svcs []*corev1.Service
	var slices_ []*discoveryv1.EndpointSlice
	var nodes []*corev1.Node
	for i, n := 0, s.n(6); i < n; i++ {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: pick(s, []string{"default", "kube-system"}), Name: fmt.Sprintf("s%d", i)}}
		sp := &svc.Spec
		sp.Type = pick(s, fzTypes)
		switch s.n(4) {
		case 0:
			sp.ClusterIP = pick(s, fzAddrs)
		case 1:
			sp.ClusterIPs = []string{pick(s, fzAddrs)}
			sp.ClusterIP = sp.ClusterIPs[0]
		case 2:
			sp.ClusterIPs = []string{pick(s, fzAddrs), pick(s, fzAddrs)}
		case 3:
			sp.ClusterIP = "None"
		}
		for k := s.n(4); k > 0; k-- {
			sp.ExternalIPs = append(sp.ExternalIPs, pick(s, fzAddrs))
		}
		for k := s.n(4); k > 0; k-- {
			sp.Ports = append(sp.Ports, corev1.ServicePort{Name: pick(s, fzNames), Protocol: pick(s, fzProtos),
				Port: pick(s, fzPorts), NodePort: pick(s, fzPorts)})
		}
		sp.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(pick(s, fzPolicies))
		if p := pick(s, fzPolicies); p != "" {
			sp.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicy(p))
		}
		sp.HealthCheckNodePort = pick(s, fzPorts)
		sp.SessionAffinity = pick(s, fzAffinity)
		if s.n(2) == 1 {
			sp.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(pick(s, fzTimeouts))}}
		}
		for k := s.n(3); k > 0; k-- {
			sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, pick(s, fzRanges))
		}
		for k := s.n(3); k > 0; k-- {
			in := corev1.LoadBalancerIngress{IP: pick(s, fzAddrs)}
			if s.n(3) == 1 {
				in.IPMode = new(corev1.LoadBalancerIPModeProxy)
			}
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, in)
		}
		f := s.n(8)
		if f&1 != 0 {
			svc.Annotations = map[string]string{convert.AnnotationScheduler: pick(s, fzSchedulers),
				convert.AnnotationSourceRanges: pick(s, fzRanges) + "," + pick(s, fzRanges)}
		}
		if f&2 != 0 {
			svc.Labels = map[string]string{convert.LabelServiceProxyName: "other"}
		}
		if f&4 != 0 {
			sp.TrafficDistribution = new(pick(s, []string{"PreferSameNode", "PreferClose", "x"}))
		}
		svcs = append(svcs, svc)

		for j, m := 0, s.n(3); j < m; j++ {
			sl := &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%d", svc.Name, j)},
				AddressType: pick(s, fzAddrTypes),
			}
			if s.n(8) != 0 {
				sl.Labels = map[string]string{convert.LabelServiceName: svc.Name}
			}
			for k := s.n(4); k > 0; k-- {
				p := discoveryv1.EndpointPort{}
				if s.n(3) != 0 {
					p.Name = new(pick(s, fzNames))
				}
				if s.n(3) != 0 {
					p.Protocol = new(pick(s, fzProtos))
				}
				if s.n(5) != 0 {
					p.Port = new(pick(s, fzPorts))
				}
				sl.Ports = append(sl.Ports, p)
			}
			for k := s.n(6); k > 0; k-- {
				e := discoveryv1.Endpoint{}
				for a := s.n(3); a > 0; a-- {
					e.Addresses = append(e.Addresses, pick(s, fzAddrs))
				}
				e.Conditions = discoveryv1.EndpointConditions{Ready: s.optBool(), Serving: s.optBool(), Terminating: s.optBool()}
				if nn := pick(s, fzNodeNames); nn != "" {
					e.NodeName = new(nn)
				}
				if s.n(3) == 1 {
					e.Zone = new("z1")
					e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}, ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}
				}
				sl.Endpoints = append(sl.Endpoints, e)
			}
			slices_ = append(slices_, sl)
		}
	}
	for i, n := 0, s.n(4); i < n; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fzNodeNames[1+i%3] + strings.Repeat("x", i/3)}}
		for k := s.n(4); k > 0; k-- {
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{
				Type:    pick(s, []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName, "Odd"}),
				Address: pick(s, fzAddrs)})
		}
		if s.n(2) == 1 {
			node.Labels = map[string]string{"topology.kubernetes.io/zone": "z1"}
		}
		nodes = append(nodes, node)
	}
	return svcs, slices_, nodes
}

func reversed[T any](in []T) []T {
	out := slices.Clone(in)
	slices.Reverse(out)
	return out
}

// FuzzConvertFields converts objects whose fields are picked from pools of
// ordinary, boundary and hostile values.
func FuzzConvertFields(f *testing.F) {
	f.Add([]byte{1, 0, 2, 1, 0, 1, 1, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 2, 1, 2, 3, 1, 2})
	f.Add([]byte{5, 2, 3, 1, 3, 3, 4, 7, 3, 17, 19, 22, 2, 1, 4, 6, 2, 1, 2, 3, 1, 5, 6, 9, 9, 1, 1, 1, 1, 2, 2, 2})
	f.Add([]byte("hostile externalIPs and node addresses: 198.51.100.1, 127.0.0.1, 169.254.169.254"))
	f.Fuzz(func(t *testing.T, data []byte) {
		svcs, eps, nodes := objectsFromBytes(data)
		c := convert.Convert(svcs, eps, nodes)
		if c2 := convert.Convert(reversed(svcs), reversed(eps), reversed(nodes)); !reflect.DeepEqual(c, c2) {
			t.Fatalf("Convert depends on input order:\n%+v\n%+v", c, c2)
		}
		checkCluster(t, c)
		checkNothingDropped(t, svcs, c)
		checkPlan(t, c)
		checkStripped(t, svcs, eps, nodes, c)
	})
}

// FuzzConvertObjects decodes a Service, an EndpointSlice and a Node from
// arbitrary JSON, as a watch could deliver them, and converts them.
func FuzzConvertObjects(f *testing.F) {
	svcs, eps, nodes := objectsFromBytes([]byte{3, 0, 2, 1, 0, 1, 1, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 2, 1, 2, 3, 1, 2, 2, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5})
	for i := range max(len(svcs), len(eps), len(nodes)) {
		var a, b, c []byte
		if i < len(svcs) {
			a, _ = json.Marshal(svcs[i])
		}
		if i < len(eps) {
			b, _ = json.Marshal(eps[i])
		}
		if i < len(nodes) {
			c, _ = json.Marshal(nodes[i])
		}
		f.Add(a, b, c)
	}
	f.Add([]byte(`{"metadata":{"name":"x","namespace":"d"},"spec":{"clusterIP":"10.96.0.1","externalIPs":["198.51.100.1","x"],"ports":[{"port":80},{"port":80}]}}`),
		[]byte(`{"metadata":{"name":"x-1","namespace":"d","labels":{"kubernetes.io/service-name":"x"}},"addressType":"IPv4","endpoints":[{"addresses":["10.244.0.1"]},{"addresses":[]}],"ports":[{"port":8080}]}`),
		[]byte(`{"metadata":{"name":"n1"},"status":{"addresses":[{"type":"InternalIP","address":"198.51.100.1"},{"type":"InternalIP","address":"bad"}]}}`))
	f.Fuzz(func(t *testing.T, svcJSON, sliceJSON, nodeJSON []byte) {
		var svcs []*corev1.Service
		var eps []*discoveryv1.EndpointSlice
		var nodes []*corev1.Node
		if s := new(corev1.Service); json.Unmarshal(svcJSON, s) == nil {
			svcs = append(svcs, s, nil)
		}
		if s := new(discoveryv1.EndpointSlice); json.Unmarshal(sliceJSON, s) == nil {
			eps = append(eps, s, nil)
		}
		if n := new(corev1.Node); json.Unmarshal(nodeJSON, n) == nil {
			nodes = append(nodes, n, nil)
		}
		c := convert.Convert(svcs, eps, nodes)
		if c2 := convert.Convert(svcs, eps, nodes); !reflect.DeepEqual(c, c2) {
			t.Fatal("Convert is not deterministic")
		}
		checkCluster(t, c)
		checkNothingDropped(t, svcs, c)
		checkPlan(t, c)
		checkStripped(t, svcs, eps, nodes, c)
	})
}

// checkStripped asserts that the informers' transform keeps everything the
// conversion reads: the Nodes' lean copies, and the Services and
// EndpointSlices rebuilt from their cache entries, convert to c too.
func checkStripped(t *testing.T, svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node, c model.Cluster) {
	t.Helper()
	lean := func(o any) any {
		out, err := informers.StripUnused(o)
		if err != nil {
			t.Fatalf("StripUnused: %v", err)
		}
		return out
	}
	var ls []*corev1.Service
	var le []*discoveryv1.EndpointSlice
	var ln []*corev1.Node
	for _, o := range svcs {
		ls = append(ls, informers.ConvertedService(lean(o)))
	}
	for _, o := range eps {
		le = append(le, informers.ConvertedSlice(lean(o)))
	}
	for _, o := range nodes {
		ln = append(ln, lean(o).(*corev1.Node))
	}
	if got := convert.Convert(ls, le, ln); !reflect.DeepEqual(got, c) {
		t.Fatalf("Convert differs after StripUnused:\n%+v\n%+v", got, c)
	}
}

// checkCluster asserts what the planner relies on: sorted, unique service
// ports with a protocol, a port and one or two cluster IPs of distinct
// families; endpoints only for known ports, with usable unicast addresses
// of the service's families; complete, sorted refusals.
func checkCluster(t *testing.T, c model.Cluster) {
	t.Helper()
	fams := map[types.NamespacedName][2]bool{}
	ports := map[model.ServicePortName]bool{}
	for i, sp := range c.Services {
		if i > 0 && c.Services[i-1].Name.Compare(sp.Name) >= 0 {
			t.Fatalf("services not sorted or not unique: %v then %v", c.Services[i-1].Name, sp.Name)
		}
		ports[sp.Name] = true
		if sp.Port == 0 || !slices.Contains([]model.Protocol{model.TCP, model.UDP, model.SCTP}, sp.Protocol) {
			t.Fatalf("%v: bad port %d/%q", sp.Name, sp.Port, sp.Protocol)
		}
		if n := len(sp.ClusterIPs); n < 1 || n > 2 || (n == 2 && sp.ClusterIPs[0].Is4() == sp.ClusterIPs[1].Is4()) {
			t.Fatalf("%v: cluster IPs %v", sp.Name, sp.ClusterIPs)
		}
		var f [2]bool
		for _, a := range sp.ClusterIPs {
			f[fam(a)] = true
		}
		fams[sp.Name.NamespacedName] = f
		for _, list := range [][]netip.Addr{sp.ClusterIPs, sp.ExternalIPs, sp.LoadBalancerIPs} {
			for _, a := range list {
				if !a.IsValid() || a.Zone() != "" {
					t.Fatalf("%v: address %v", sp.Name, a)
				}
			}
		}
		for _, p := range sp.LoadBalancerSourceRanges {
			if !p.IsValid() || p != p.Masked() {
				t.Fatalf("%v: source range %v", sp.Name, p)
			}
		}
		if sp.AffinityTimeout > convert.MaxAffinityTimeout {
			t.Fatalf("%v: affinity %d", sp.Name, sp.AffinityTimeout)
		}
	}
	for name, es := range c.Endpoints {
		if !ports[name] {
			t.Fatalf("endpoints for unknown port %v", name)
		}
		for i, e := range es {
			if !e.Address.IsValid() || e.Address.Zone() != "" || e.Port == 0 || e.Address.IsLoopback() ||
				e.Address.IsUnspecified() || e.Address.IsMulticast() || e.Address.IsLinkLocalUnicast() || e.Address.Is4In6() {
				t.Fatalf("%v: unusable endpoint %+v", name, e)
			}
			if !fams[name.NamespacedName][fam(e.Address)] {
				t.Fatalf("%v: endpoint %v of a family the service lacks", name, e.Address)
			}
			if i > 0 && (es[i-1].Address.Compare(e.Address) > 0 || es[i-1].Address == e.Address && es[i-1].Port >= e.Port) {
				t.Fatalf("%v: endpoints not sorted or not unique", name)
			}
		}
	}
	for i := 1; i < len(c.Nodes); i++ {
		if c.Nodes[i-1].Name > c.Nodes[i].Name {
			t.Fatal("nodes not sorted")
		}
	}
	for i, r := range c.Refusals {
		// The address may be empty (an empty field is refused as written).
		if r.Subject.IsZero() || r.Field == "" || r.Reason == "" || r.Message == "" {
			t.Fatalf("incomplete refusal %+v", r)
		}
		// A value with spaces or control characters is one word, Go-quoted
		// (seed quoted-space-protocol).
		if w := model.Word(r.Address); strings.ContainsFunc(w, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) {
			t.Fatalf("refusal address is not one printable word: %s", w)
		}
		if i > 0 && c.Refusals[i-1].Compare(r) > 0 {
			t.Fatalf("refusals not sorted: %v then %v", c.Refusals[i-1], r)
		}
	}
}

// checkNothingDropped asserts that every port and every externalIP of a
// proxied Service is either used or refused by name.
func checkNothingDropped(t *testing.T, svcs []*corev1.Service, c model.Cluster) {
	t.Helper()
	refused := map[string]bool{}
	for _, r := range c.Refusals {
		refused[r.Subject.String()+" "+r.Field+" "+r.Address] = true
		refused[r.Subject.String()+" "+r.Field] = true
	}
	for _, svc := range svcs {
		if svc == nil || convert.SkipReason(svc) != "" {
			continue
		}
		name := convert.ServiceName(svc)
		key := name.String()
		var mine []model.ServicePort
		for _, sp := range c.Services {
			if sp.Name.NamespacedName == name {
				mine = append(mine, sp)
			}
		}
		if len(mine) == 0 {
			// Not proxied at all: a cluster IP refusal or no valid port.
			if len(svc.Spec.Ports) > 0 && !refused[key+" spec.clusterIP"] && !refused[key+" spec.clusterIPs"] &&
				!slices.ContainsFunc(c.Refusals, func(r model.Refusal) bool {
					return r.Subject == model.ServiceSubject(name) && strings.HasPrefix(r.Field, "spec.ports[")
				}) {
				t.Fatalf("%s: silently not proxied", key)
			}
			continue
		}
		for i, p := range svc.Spec.Ports {
			if slices.ContainsFunc(mine, func(sp model.ServicePort) bool { return sp.Name.Port == p.Name }) {
				continue
			}
			if !slices.ContainsFunc(c.Refusals, func(r model.Refusal) bool {
				return r.Subject == model.ServiceSubject(name) && strings.HasPrefix(r.Field, fmt.Sprintf("spec.ports[%d].", i))
			}) {
				t.Fatalf("%s: spec.ports[%d] %+v silently dropped", key, i, p)
			}
		}
		for _, s := range svc.Spec.ExternalIPs {
			a, err := convert.ParseAddr(s)
			if err == nil && slices.Contains(mine[0].ExternalIPs, a) {
				continue
			}
			if !refused[key+" spec.externalIPs "+s] {
				t.Fatalf("%s: externalIP %q silently dropped", key, s)
			}
		}
	}
}

// checkPlan plans the converted cluster for node n1 and asserts that no
// address the guard protects is planned for kube-ipvs0, and that the text
// output keeps its structure.
func checkPlan(t *testing.T, c model.Cluster) {
	t.Helper()
	o := planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:100::1")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")}}
	st := planner.Plan(c, o)
	g := guard.New(guard.Inputs{LocalAddrs: o.LocalAddrs, Nodes: c.Nodes, PodCIDRs: o.ClusterCIDRs})
	for _, p := range st.Addresses {
		if v := g.Check(p.Addr()); v.Protected {
			t.Fatalf("planned %s on kube-ipvs0 although protected (%s)", p, v.Reason)
		}
	}
	checkText(t, st)
}

func fam(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}
