package iptables_test

import (
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// TestRestoreFailureReported: a sync whose iptables-restore fails tells
// OnRestoreFailure its family once (kube-proxy's
// sync_proxy_rules_iptables_restore_failures_total); a sync that writes
// cleanly tells nothing.
func TestRestoreFailureReported(t *testing.T) {
	a, _ := newFakeSyncer(t)
	var got []string
	a.OnRestoreFailure = func(family string) { got = append(got, family) }
	rs := testRules(iptables.FamilyIPv4)
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{rs}})); err != nil || len(got) != 0 {
		t.Fatalf("clean Full: %v, failures reported %v", err, got)
	}
	bad := iptables.Ruleset{Family: rs.Family, Tables: slices.Clone(rs.Tables)}
	chains := slices.Clone(bad.Tables[0].Chains)
	// A jump to a chain nobody creates: the restore refuses it.
	chains[1].Rules = append(slices.Clone(chains[1].Rules), iptables.Rule{"-j", "KUBE-NOWHERE"})
	bad.Tables[0].Chains = chains
	if err := syncErr(a.Full(iptables.Desired{Sets: nil, Rules: []iptables.Ruleset{bad}})); err == nil {
		t.Fatal("Full with a jump to no chain: no error")
	}
	if !slices.Equal(got, []string{iptables.FamilyIPv4}) {
		t.Fatalf("failures reported %v, want [%s] once", got, iptables.FamilyIPv4)
	}
}
