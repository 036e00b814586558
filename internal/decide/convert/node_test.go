package convert

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodePodCIDRs: spec.podCIDRs, the first of each family, else
// spec.podCIDR; one that does not parse is refused naming it, and leaves
// its family without a pod CIDR.
func TestNodePodCIDRs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     corev1.NodeSpec
		want     []string
		refusals string
	}{
		{"dual-stack", corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
			[]string{"10.244.1.0/24", "fd00:10:244:1::/64"}, ""},
		{"podCIDR alone", corev1.NodeSpec{PodCIDR: "10.244.2.0/24"}, []string{"10.244.2.0/24"}, ""},
		{"none", corev1.NodeSpec{}, nil, ""},
		{"first of a family, host bits masked", corev1.NodeSpec{PodCIDRs: []string{"10.244.3.7/24", "10.244.4.0/24"}}, []string{"10.244.3.0/24"}, ""},
		{"unparsable", corev1.NodeSpec{PodCIDRs: []string{"10.244.5.0", "fd00::/64"}}, []string{"fd00::/64"},
			"Node/n1 spec.podCIDRs[0] 10.244.5.0 InvalidAddress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, refusals := NodeFromObject(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: tc.spec})
			var gs []string
			for _, p := range got.PodCIDRs {
				gs = append(gs, p.String())
			}
			if !slices.Equal(gs, tc.want) {
				t.Errorf("PodCIDRs %v, want %v", gs, tc.want)
			}
			if g := strings.Join(refusalStrings(refusals), "\n"); g != tc.refusals {
				t.Errorf("refusals %q, want %q", g, tc.refusals)
			}
			for _, p := range got.PodCIDRs {
				if p != p.Masked() || !p.IsValid() {
					t.Errorf("%s: not a masked prefix", p)
				}
			}
		})
	}
}
