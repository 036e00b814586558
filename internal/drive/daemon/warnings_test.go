package daemon

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// TestRangeWarnings: run warns at start for each of --cluster-cidr and
// --service-cidrs it was not given, and for none it was.
func TestRangeWarnings(t *testing.T) {
	p := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}
	for _, tt := range []struct {
		o    planner.Options
		want []string
	}{
		{planner.Options{}, []string{"--cluster-cidr unknown", "--service-cidrs unknown"}},
		{planner.Options{ClusterCIDRs: p}, []string{"--service-cidrs unknown"}},
		{planner.Options{ServiceCIDRs: p}, []string{"--cluster-cidr unknown"}},
		{planner.Options{ClusterCIDRs: p, ServiceCIDRs: p}, nil},
	} {
		got := rangeWarnings(&tt.o)
		if len(got) != len(tt.want) {
			t.Errorf("cluster %v service %v: warnings %q, want %q", tt.o.ClusterCIDRs, tt.o.ServiceCIDRs, got, tt.want)
			continue
		}
		for i, w := range tt.want {
			if !strings.HasPrefix(got[i], w) {
				t.Errorf("warning %q, want it to start %q", got[i], w)
			}
		}
	}
}
