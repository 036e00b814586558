package iptables_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// TestTakeoverFromIPTablesMode: over what kube-proxy's iptables mode left
// (testdata/kube-proxy-1.34-iptables), the takeover goes in two steps, so
// that a ClusterIP is served throughout. Full writes the proxy's chains and
// leaves kube-proxy's DNAT in front: nat KUBE-SERVICES still jumps to its
// service chains, which all exist (the VIPs are not bound yet, and IPVS
// serves only local addresses). FinishTakeover, which the applier calls
// after binding them, then leaves the proxy's chains and jumps exactly as
// over its IPVS mode, and nothing of the iptables mode: its per-service
// chains (KUBE-SVC-*, KUBE-SEP-*, KUBE-EXT-*, KUBE-FW-*, KUBE-SVL-*), its
// KUBE-NODEPORTS, filter KUBE-SERVICES (the REJECT of a Service without
// endpoints) and KUBE-EXTERNAL-SERVICES are gone, each by name; an
// administrator's chain and the service chain it jumps to stay, and so do
// the kubelet's canaries. A second FinishTakeover runs nothing.
func TestTakeoverFromIPTablesMode(t *testing.T) {
	save, err := os.ReadFile("testdata/kube-proxy-1.34-iptables/iptables.save")
	if err != nil {
		t.Fatal(err)
	}
	a, k := newFakeSyncer(t)
	loadSave(t, k.tables[iptables.FamilyIPv4], string(save))
	sets, rules := kubeProxyPlan(t)
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatalf("Full over kube-proxy's iptables mode: %v", err)
	}
	held := k.tables[iptables.FamilyIPv4].Dump()
	for _, serving := range []string{
		`-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O`,
		"-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment",
		"-A KUBE-SEP-C6EBXVWJJZMIWKLZ -p tcp -m comment --comment ns3/svc3:p80 -m tcp -j DNAT --to-destination 10.180.0.4:80",
		"-A KUBE-NODE-PORT ", // the proxy's own chains are written
	} {
		if !strings.Contains(held, serving) {
			t.Errorf("before FinishTakeover (the VIPs not bound yet), %q is missing: kube-proxy's DNAT must stay in front until IPVS serves:\n%s", serving, held)
		}
	}

	if err := a.FinishTakeover(); err != nil {
		t.Fatalf("FinishTakeover: %v", err)
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
	execs := k.tables[iptables.FamilyIPv4].Execs
	if err := a.FinishTakeover(); err != nil || k.tables[iptables.FamilyIPv4].Execs != execs {
		t.Errorf("a second FinishTakeover: %v, %d iptables processes; want none", err, k.tables[iptables.FamilyIPv4].Execs-execs)
	}
}

// TestTakeoverFromRealIPTablesMode: the same over what kube-proxy v1.34.4
// itself wrote in the takeover bed (testdata/kube-proxy-1.34.4-iptables-bed):
// after Full its DNAT is still in front; after FinishTakeover no chain of
// its iptables mode and no jump to one is left in either family, and its
// filter KUBE-FIREWALL, which guards the route_localnet=1 it set, stays.
func TestTakeoverFromRealIPTablesMode(t *testing.T) {
	a, k := newFakeSyncer(t)
	for fam, file := range map[string]string{iptables.FamilyIPv4: "iptables.save", iptables.FamilyIPv6: "ip6tables.save"} {
		// kube-proxy's canary is in mangle, which the fake does not start
		// with.
		k.tables[fam].Tables["mangle"] = map[string][]string{}
		save, err := os.ReadFile("testdata/kube-proxy-1.34.4-iptables-bed/" + file)
		if err != nil {
			t.Fatal(err)
		}
		loadSave(t, k.tables[fam], string(save))
	}
	a.SetLogger(zaptest.NewLogger(t))
	sets, rules := kubeProxyPlan(t)
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if held := k.tables[iptables.FamilyIPv4].Dump(); !regexp.MustCompile(`(?m)^-A KUBE-SERVICES .* -j KUBE-SVC-`).MatchString(held) {
		t.Errorf("kube-proxy's DNAT jumps left KUBE-SERVICES before FinishTakeover:\n%s", held)
	}
	if err := a.FinishTakeover(); err != nil {
		t.Fatal(err)
	}
	mode := regexp.MustCompile(`KUBE-(SVC|SVL|SEP|EXT|FW)-|KUBE-NODEPORTS|KUBE-EXTERNAL-SERVICES|KUBE-PROXY-CANARY`)
	for _, fam := range []string{iptables.FamilyIPv4, iptables.FamilyIPv6} {
		if after := k.tables[fam].Dump(); mode.MatchString(after) {
			t.Errorf("%s: kube-proxy's iptables mode left after the takeover:\n%s", fam, after)
		}
	}
	if after := k.tables[iptables.FamilyIPv4].Dump(); !strings.Contains(after, "-A INPUT -j KUBE-FIREWALL") ||
		!strings.Contains(after, `"block incoming localnet connections"`) {
		t.Errorf("KUBE-FIREWALL or its jump is gone:\n%s", after)
	}
}
