package convert

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// wideService is a LoadBalancer Service with nports ports, nlb ingress IPs
// (198.51.N.M), next externalIPs (10.N.M.1, with one duplicate and one
// junk entry among them) and nranges source ranges.
func wideService(nports, nlb, next, nranges int) *corev1.Service {
	return svc("wide", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.Ports = nil
		for i := range nports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(1000 + i), Protocol: corev1.ProtocolTCP})
		}
		for i := range nlb {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: fmt.Sprintf("198.51.%d.%d", i/250, i%250+1)})
		}
		for i := range next {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, fmt.Sprintf("10.%d.%d.1", i/250, i%250))
		}
		if next > 2 {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs[:2], append([]string{"10.0.0.1", "junk"}, s.Spec.ExternalIPs[2:]...)...)
		}
		for i := range nranges {
			s.Spec.LoadBalancerSourceRanges = append(s.Spec.LoadBalancerSourceRanges, fmt.Sprintf("203.%d.%d.0/24", i/250, i%250))
		}
	})
}

func TestCapExternal(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		cv                    Converter
		svc                   *corev1.Service
		lb, ext, ranges       int
		refused               []string
		first, messageContain string
	}{
		{
			name: "under the cap: everything", svc: wideService(10, 2, 98, 5), lb: 2, ext: 98, ranges: 5,
			refused: []string{`default/wide spec.externalIPs junk InvalidAddress`},
		},
		{
			name: "2,000 externalIPs × 10 ports: LoadBalancer IPs first, then the first 98 externalIPs in spec order",
			svc:  wideService(10, 2, 2000, 1), lb: 2, ext: 98, ranges: 1,
			refused:        []string{`default/wide spec.externalIPs junk InvalidAddress`, `default/wide spec.externalIPs 10.0.98.1 TooManyVirtualServers`},
			messageContain: "1902 of 2000 externalIPs not served (10.0.98.1 to 10.7.249.1, in spec order): 10 ports × 2002 addresses would be 20020 virtual servers on every node, over --max-virtual-servers-per-service 1000; the first 100 addresses",
		},
		{
			name: "more ports than the cap: no external address at all",
			svc:  wideService(1001, 1, 1, 0), lb: 0, ext: 0,
			refused: []string{`default/wide status.loadBalancer.ingress 198.51.0.1 TooManyVirtualServers`, `default/wide spec.externalIPs 10.0.0.1 TooManyVirtualServers`},
		},
		{
			name: "source ranges × LoadBalancer IPs × ports over the cap: the first ranges only",
			svc:  wideService(10, 1, 0, 200), lb: 1, ext: 0, ranges: 100,
			refused:        []string{`default/wide spec.loadBalancerSourceRanges 203.0.100.0/24 TooManyVirtualServers`},
			messageContain: "100 of 200 source ranges not allowed in (203.0.100.0/24 to 203.0.199.0/24, in spec order)",
		},
		{
			name: "a higher cap is honoured",
			cv:   Converter{MaxVirtualServers: 30000}, svc: wideService(10, 2, 2000, 1), lb: 2, ext: 2000, ranges: 1,
			refused: []string{`default/wide spec.externalIPs junk InvalidAddress`},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ports, refusals := tt.cv.ServicePorts(tt.svc)
			if len(ports) == 0 {
				t.Fatalf("no ports; refusals %v", refusals)
			}
			for _, p := range ports {
				if len(p.LoadBalancerIPs) != tt.lb || len(p.ExternalIPs) != tt.ext || len(p.LoadBalancerSourceRanges) != tt.ranges {
					t.Fatalf("%s: %d LoadBalancer IPs, %d externalIPs, %d ranges; want %d, %d, %d",
						p.Name, len(p.LoadBalancerIPs), len(p.ExternalIPs), len(p.LoadBalancerSourceRanges), tt.lb, tt.ext, tt.ranges)
				}
			}
			if tt.lb > 0 && ports[0].LoadBalancerIPs[0] != netip.MustParseAddr("198.51.0.1") {
				t.Errorf("first LoadBalancer IP %v", ports[0].LoadBalancerIPs[0])
			}
			if tt.ext > 2 && ports[0].ExternalIPs[2] != netip.MustParseAddr("10.0.2.1") {
				t.Errorf("externalIPs not in spec order without duplicates: %v", ports[0].ExternalIPs[:3])
			}
			if g, w := strings.Join(refusalStrings(refusals), "\n"), strings.Join(tt.refused, "\n"); g != w {
				t.Errorf("refusals:\n got %s\nwant %s", g, w)
			}
			if tt.messageContain != "" {
				found := false
				for _, r := range refusals {
					found = found || (r.Reason == model.ReasonTooManyVirtualServers && strings.Contains(r.Message, tt.messageContain))
				}
				if !found {
					t.Errorf("no refusal message containing %q in %v", tt.messageContain, refusals)
				}
			}
		})
	}
}

// BenchmarkParseAddrList is the conversion of 60,000 externalIPs, deduplicated
// in O(n) (it was O(n²); see BenchmarkParseAddrList).
//
//	go test -run '^$' -bench ParseAddrList ./informers/
func BenchmarkParseAddrList(b *testing.B) {
	s := wideService(1, 0, 60000, 0)
	r := &refuser{}
	b.ReportAllocs()
	for b.Loop() {
		r.out = r.out[:0]
		if got := parseAddrList(r, "spec.externalIPs", s.Spec.ExternalIPs); len(got) != 60000 {
			b.Fatalf("%d addresses", len(got))
		}
	}
}
