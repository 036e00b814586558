package iptables_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// TestTakeoverFromIPTablesMode: over what kube-proxy's iptables mode left
// (testdata/kube-proxy-1.34-iptables), one Full leaves the proxy's chains
// and jumps exactly as over its IPVS mode, and nothing of the iptables
// mode: its per-service chains (KUBE-SVC-*, KUBE-SEP-*, KUBE-EXT-*,
// KUBE-FW-*, KUBE-SVL-*), its KUBE-NODEPORTS, filter KUBE-SERVICES (the
// REJECT of a Service without endpoints) and KUBE-EXTERNAL-SERVICES are
// gone, each by name; an administrator's chain and the service chain it
// jumps to stay, and so do the kubelet's canaries.
func TestTakeoverFromIPTablesMode(t *testing.T) {
	save, err := os.ReadFile("testdata/kube-proxy-1.34-iptables/iptables.save")
	if err != nil {
		t.Fatal(err)
	}
	a, k := newFakeSyncer(t)
	loadSave(t, k.tables[iptables.FamilyIPv4], string(save))
	sets, rules := kubeProxyPlan(t)
	if err := a.Full(sets, rules); err != nil {
		t.Fatalf("Full over kube-proxy's iptables mode: %v", err)
	}
	after := k.tables[iptables.FamilyIPv4].Dump()
	checkChains(t, k.tables[iptables.FamilyIPv4], rules[0])
	// USER-SVC1 jumps to a service chain: someone else's chain holds it,
	// and what it jumps to.
	want := append(slices.Clone(takenOverChains4), "nat/KUBE-SEP-SXIVWICOYRO3J4NJ", "nat/KUBE-SVC-XPGD46QRK7WJZT7O")
	slices.Sort(want)
	if got := kubeChainsIn(after); !slices.Equal(got, want) {
		t.Errorf("KUBE chains and jumps after the takeover:\n%q\nwant:\n%q\n%s", got, want, after)
	}
	for _, gone := range []string{"has no endpoints", "10.180.0.3", "10.180.0.4", "KUBE-EXT-", "KUBE-FW-", "KUBE-SVL-", "KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES", "KUBE-PROXY-CANARY"} {
		if strings.Contains(after, gone) {
			t.Errorf("%s left after the takeover:\n%s", gone, after)
		}
	}
	if !strings.Contains(after, "-A USER-SVC1 -j KUBE-SVC-XPGD46QRK7WJZT7O") || !strings.Contains(after, "-A PREROUTING -s 203.0.113.0/24 -j USER-SVC1") {
		t.Errorf("the administrator's chain or its jump is gone:\n%s", after)
	}
}
