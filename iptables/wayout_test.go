package iptables_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// TestCleanupAroundIPTablesMode is the way out to kube-proxy's iptables
// mode: kube-proxy has rewritten the chains it shares by name with the
// proxy (KUBE-SERVICES with its DNAT jumps, KUBE-POSTROUTING,
// KUBE-MARK-MASQ, KUBE-FORWARD, KUBE-PROXY-FIREWALL) and added its own;
// the proxy's chains, jumps and sets are still there. A Cleanup of the
// empty plan WithoutChains(IPTablesModeShared) removes the proxy's own
// chains (KUBE-NODE-PORT, KUBE-LOAD-BALANCER, KUBE-IPVS-FILTER,
// KUBE-SOURCE-RANGES-FIREWALL), their jumps and its sets, and leaves every
// chain of kube-proxy's, with its rules, and the jumps to the shared ones.
func TestCleanupAroundIPTablesMode(t *testing.T) {
	a, k := newFakeSyncer(t)
	sets, rules := kubeProxyPlan(t)
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	save, err := os.ReadFile("testdata/kube-proxy-1.34-iptables/iptables.save")
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy's iptables-restore --noflush rewrites its own chains; in
	// the built-in chains it ensures its jumps beside the proxy's.
	kp := regexp.MustCompile(`(?m)^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) .*\n`).ReplaceAllString(string(save), "")
	loadSave(t, k.tables[iptables.FamilyIPv4], kp)
	before := k.tables[iptables.FamilyIPv4].Dump()

	// `ipvs-proxy cleanup` is a process of its own: a Syncer that has
	// written nothing.
	c := iptables.NewSyncerForTest(k.sets, func(f string) (iptables.RuleRunner, error) { return k.tables[f], nil }, nil)
	if err := syncErr(c.Cleanup(iptables.Desired{Sets: iptables.EmptySets(iptables.FamilyIPv4), Rules: iptables.WithoutChains(rules, iptables.IPTablesModeShared)})); err != nil {
		t.Fatalf("Cleanup around kube-proxy's iptables mode: %v", err)
	}
	after := k.tables[iptables.FamilyIPv4].Dump()
	for _, line := range strings.Split(kp, "\n") {
		if strings.HasPrefix(line, "-A ") && !iptables.IsBuiltinChain(strings.Fields(line)[1]) && !strings.Contains(after, line) {
			t.Errorf("kube-proxy's rule %q is gone", line)
		}
	}
	for _, jump := range []string{"nat/PREROUTING -> KUBE-SERVICES", "nat/OUTPUT -> KUBE-SERVICES", "nat/POSTROUTING -> KUBE-POSTROUTING",
		"filter/FORWARD -> KUBE-FORWARD", "filter/FORWARD -> KUBE-PROXY-FIREWALL", "filter/INPUT -> KUBE-PROXY-FIREWALL"} {
		if !slices.Contains(kubeChainsIn(after), jump) {
			t.Errorf("jump %s to a chain kube-proxy shares is gone:\n%s", jump, after)
		}
	}
	for _, gone := range []string{iptables.ChainNodePort, iptables.ChainLoadBalancer, iptables.ChainIPVSFilter, iptables.ChainSourceRangesFirewall, "match-set"} {
		if strings.Contains(after, gone) {
			t.Errorf("%s left after the cleanup:\n%s", gone, after)
		}
	}
	if n := len(k.sets.Sets); n != 0 {
		t.Errorf("%d ipsets left, want none", n)
	}
	if t.Failed() {
		t.Logf("before the cleanup:\n%s", before)
	}
}
