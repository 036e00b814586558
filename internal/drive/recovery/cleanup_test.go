package recovery

import (
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

func TestEmptyPlanCoversBothFamilies(t *testing.T) {
	sets, rules := emptyPlan()
	var fams []string
	for _, rs := range rules {
		fams = append(fams, rs.Family)
	}
	if !slices.Equal(fams, []string{iptables.FamilyIPv4, iptables.FamilyIPv6}) {
		t.Fatalf("families %v", fams)
	}
	names := map[string]bool{}
	for _, s := range sets {
		if len(s.Entries) != 0 {
			t.Errorf("set %s has entries", s.Name)
		}
		names[s.Name] = true
	}
	for _, want := range []string{iptables.SetClusterIP, iptables.SetIPVSIPs, iptables.SetName(iptables.SetClusterIP, iptables.FamilyIPv6)} {
		if !names[want] {
			t.Errorf("set %s missing from the cleanup plan", want)
		}
	}
	if len(sets) != 2*len(iptables.SetSpecs) {
		t.Errorf("%d sets, want %d", len(sets), 2*len(iptables.SetSpecs))
	}
	chains := map[string]bool{}
	for _, tb := range rules[0].Tables {
		for _, c := range tb.Chains {
			if !c.Builtin {
				chains[c.Name] = true
			}
		}
	}
	for _, want := range []string{"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-IPVS-FILTER"} {
		if !chains[want] {
			t.Errorf("chain %s missing from the cleanup plan", want)
		}
	}
}
