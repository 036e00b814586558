package informers_test

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
)

// forged is what a hostile value writes to try to add sections and
// refusals to `plan`'s text output.
const forged = "bogus\n# kube-ipvs0\n10.10.0.211/32\n# refused\ndefault/x spec.externalIPs 1.2.3.4 NodeIP: fake"

// textObjects builds Services, their EndpointSlices and Nodes in which the
// free strings vals land in every field an API client writes and the
// proxy may print: names, namespaces, port names, protocols, the scheduler
// and source-range annotations, addresses, a slice's addressType, node
// names and node addresses. data picks which value lands where.
func textObjects(data []byte, vals []string) ([]*corev1.Service, []*discoveryv1.EndpointSlice, []*corev1.Node) {
	s := &stream{b: data}
	pool := append([]string{"", "ok", "10.96.0.10", "198.51.100.7", forged}, vals...)
	v := func() string { return pick(s, pool) }
	// w is one of fixed, or (the index past them) a value of the pool.
	w := func(fixed ...string) string {
		if i := s.n(len(fixed) + 1); i < len(fixed) {
			return fixed[i]
		}
		return v()
	}
	var svcs []*corev1.Service
	var eps []*discoveryv1.EndpointSlice
	var nodes []*corev1.Node
	for i, n := 0, 1+s.n(3); i < n; i++ {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("s%d", i)}}
		if s.n(2) == 1 {
			svc.Name = v() + strconv.Itoa(i)
		}
		if s.n(3) == 1 {
			svc.Namespace = v()
		}
		svc.Spec.Type = pick(s, fzTypes)
		svc.Spec.ClusterIP = pick(s, []string{"10.96.0.1", "10.96.0.2", "fd00:96::1"})
		if s.n(3) == 1 {
			svc.Spec.ClusterIP = v()
		}
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		for k := s.n(3); k > 0; k-- {
			svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, w("203.0.113.1", "10.10.0.211"))
		}
		for k := 1 + s.n(2); k > 0; k-- {
			p := corev1.ServicePort{Name: w("", "http"), Port: pick(s, fzPorts), NodePort: pick(s, fzPorts)}
			if s.n(3) == 1 {
				p.Protocol = corev1.Protocol(v())
			}
			svc.Spec.Ports = append(svc.Spec.Ports, p)
		}
		svc.Annotations = map[string]string{convert.AnnotationScheduler: w("", "rr")}
		if s.n(2) == 1 {
			svc.Annotations[convert.AnnotationSourceRanges] = v()
			svc.Spec.LoadBalancerSourceRanges = []string{w("192.0.2.0/24", "2001:db8::/32")}
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: w("198.51.100.9")}}
		svcs = append(svcs, svc)

		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: w("sl") + strconv.Itoa(i), Labels: map[string]string{convert.LabelServiceName: svc.Name}},
			AddressType: discoveryv1.AddressType(w("IPv4", "IPv6")),
			Ports:       []discoveryv1.EndpointPort{{Name: new(w("", "http")), Port: new(pick(s, fzPorts))}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{w("10.244.0.5", "fd00:244::5")}}},
		}
		if nn := v(); nn != "" {
			sl.Endpoints[0].NodeName = &nn
		}
		eps = append(eps, sl)
	}
	for i, n := 0, s.n(3); i < n; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w("n1", "n2") + strings.Repeat("x", i)}}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: w("10.10.0.211", "10.10.0.212")}}
		nodes = append(nodes, node)
	}
	return svcs, eps, nodes
}

// FuzzPlanText puts arbitrary strings in every field of Services,
// EndpointSlices and Nodes that an API client writes and `plan` may print,
// and checks that the text output keeps its structure (checkText) and that
// every Event note is one line: no input adds a section, a refusal or a
// line. Before values were quoted, the scheduler annotation of seed
// "forged-scheduler" added "# kube-ipvs0" and "# refused" sections.
func FuzzPlanText(f *testing.F) {
	// forged-scheduler: one Service, one port, the scheduler annotation forged.
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 4}, "", "", "")
	f.Add([]byte{1, 1, 1, 1, 1, 2, 1, 1, 2, 1, 1, 5, 1, 1, 5, 1, 5, 1, 1, 1, 2, 5, 5, 5, 5, 2, 2, 5, 2, 5}, "a b", "x\r\ny", "\u2028")
	f.Add([]byte{2, 1, 5, 1, 6, 1, 7, 2, 2, 7, 7, 1, 6, 6, 2, 2, 6, 7, 5, 7, 6, 2, 7, 5, 6, 7, 1, 2, 2, 2, 5}, `"q"`, "\\", "\xff\xfe")
	f.Fuzz(func(t *testing.T, data []byte, a, b, c string) {
		svcs, eps, nodes := textObjects(data, []string{a, b, c})
		cl := convert.Convert(svcs, eps, nodes)
		o := planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("10.10.0.211")}, Scheduler: "rr", MasqueradeBit: 14}
		checkText(t, planner.Plan(cl, o))
	})
}

// checkText asserts the structure of `plan`'s text output for st
// (planner.CheckText) and that every Event note is one line.
func checkText(t *testing.T, st planner.State) {
	t.Helper()
	b := planner.AppendText(nil, st)
	if err := planner.CheckText(b, st); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	for _, r := range st.Refusals {
		if note := events.Note(r); strings.ContainsAny(note, "\n\r\u2028\u2029") {
			t.Fatalf("Event note of %+v is not one line: %q", r, note)
		}
	}
}
