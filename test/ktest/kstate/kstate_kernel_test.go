//go:build kernel

package kstate_test

// The readers' proof: state written into a fresh node namespace by the system
// tools from the plan's own rendering (ipvsadm -R, ip -batch, ipset restore,
// iptables-restore) reads back as exactly that rendering.

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest/kstate"
)

func TestReadersRoundTrip(t *testing.T) {
	node := ktest.NewNode(t)
	a := netip.MustParseAddr

	vss := []ipvs.VirtualServer{
		{Key: ipvs.Key{Protocol: model.TCP, Address: a("10.96.0.10"), Port: 80}, Scheduler: "rr",
			RealServers: []ipvs.RealServer{{Address: a("10.244.0.3"), Port: 8080, Weight: 1}, {Address: a("10.244.0.2"), Port: 8080, Weight: 0}}},
		{Key: ipvs.Key{Protocol: model.UDP, Address: a("10.96.0.10"), Port: 53}, Scheduler: "mh",
			Flags:       ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2,
			RealServers: []ipvs.RealServer{{Address: a("10.244.0.2"), Port: 53, Weight: 1}}},
		{Key: ipvs.Key{Protocol: model.SCTP, Address: a("198.51.100.1"), Port: 30080}, Scheduler: "rr",
			Flags: ipvs.FlagPersistent, PersistenceTimeout: 10800,
			RealServers: []ipvs.RealServer{{Address: a("10.244.0.2"), Port: 9999, Weight: 1}}},
		{Key: ipvs.Key{Protocol: model.TCP, Address: a("fd00:10:96::10"), Port: 443}, Scheduler: "sh",
			Flags:       ipvs.FlagSchedSH2,
			RealServers: []ipvs.RealServer{{Address: a("fd00:10:244::2"), Port: 8443, Weight: 2}}},
	}
	wantIPVS := ipvs.Save(vss)
	// Feed ipvsadm -R in another order than the plan's, to prove the sort.
	lines := strings.SplitAfter(strings.TrimSuffix(wantIPVS, "\n"), "\n")
	var restore strings.Builder
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "-A") {
			restore.WriteString(strings.TrimSuffix(lines[i], "\n") + "\n")
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "-a") {
			restore.WriteString(strings.TrimSuffix(l, "\n") + "\n")
		}
	}
	node.RunInput(t, restore.String(), "ipvsadm", "-R")

	addrs := []netip.Prefix{netip.MustParsePrefix("10.96.0.2/32"), netip.MustParsePrefix("10.96.0.10/32"), netip.MustParsePrefix("fd00:10:96::10/128")}
	node.RunInput(t, "link add kube-ipvs0 type dummy\n"+
		"addr add 10.96.0.2/32 dev kube-ipvs0\n"+
		"addr add fd00:10:96::10/128 dev kube-ipvs0 nodad noprefixroute\n"+
		"addr add 10.96.0.10/32 dev kube-ipvs0\n", "ip", "-batch", "-")

	sets := append(iptables.EmptySets(iptables.FamilyIPv4), iptables.EmptySets(iptables.FamilyIPv6)...)
	for i := range sets {
		switch sets[i].Name {
		case iptables.SetName(iptables.SetClusterIP, iptables.FamilyIPv4):
			sets[i].Entries = []iptables.Entry{
				{IP: a("10.96.0.10"), Protocol: model.UDP, Port: 53},
				{IP: a("10.96.0.10"), Protocol: model.TCP, Port: 80},
				{IP: a("10.96.0.2"), Protocol: model.TCP, Port: 443},
			}
		case iptables.SetName(iptables.SetLoopBack, iptables.FamilyIPv6):
			sets[i].Entries = []iptables.Entry{{IP: a("fd00:10:244::2"), Protocol: model.TCP, Port: 8443, Net: netip.MustParsePrefix("fd00:10:244::2/128")}}
		case iptables.SetName(iptables.SetLoadBalancerSourceCIDR, iptables.FamilyIPv4):
			sets[i].Entries = []iptables.Entry{{IP: a("203.0.113.7"), Protocol: model.TCP, Port: 80, Net: netip.MustParsePrefix("10.0.0.0/8")}}
		case iptables.SetName(iptables.SetNodePortTCP, iptables.FamilyIPv4):
			sets[i].Entries = []iptables.Entry{{Port: 30080}, {Port: 30443}}
		}
	}
	planned := planner.State{VirtualServers: vss, Addresses: addrs, IPSets: sets}
	wantSets := string(iptables.AppendSave(nil, sortedSets(sets)))
	node.RunInput(t, wantSets, "ipset", "restore")

	var wantRules [2]string
	for i, fam := range []string{iptables.FamilyIPv4, iptables.FamilyIPv6} {
		rs := iptables.Rules(iptables.RulesConfig{Family: fam, MasqueradeBit: 14})
		planned.Rulesets = append(planned.Rulesets, rs)
		wantRules[i] = string(iptables.AppendRestore(nil, &rs))
		bin := "iptables-restore"
		if fam == iptables.FamilyIPv6 {
			bin = "ip6tables-restore"
		}
		node.RunInput(t, wantRules[i], bin, "--noflush")
	}

	check := func(what, want, got string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: kernel reads back differently from the plan form:\n%s", what, kstate.Diff(want, got))
		}
	}
	check("ipvs", wantIPVS, kstate.IPVSText(t, node.NS))
	check("kube-ipvs0", "10.96.0.2/32\n10.96.0.10/32\nfd00:10:96::10/128\n", kstate.AddressesText(t, node.NS, "kube-ipvs0"))
	check("ipset", wantSets, kstate.IPSetText(t, node.NS))
	check("iptables", wantRules[0], kstate.RulesText(t, node.NS, iptables.FamilyIPv4))
	check("ip6tables", wantRules[1], kstate.RulesText(t, node.NS, iptables.FamilyIPv6))

	// The planner's State is sorted (virtual servers, real servers, sets, entries).
	ipvs.Sort(planned.VirtualServers)
	planned.IPSets = sortedSets(planned.IPSets)
	var plan strings.Builder
	if err := planner.WriteText(&plan, planned); err != nil {
		t.Fatal(err)
	}
	check("whole plan text", plan.String(), kstate.Text(t, node.NS))

	if _, err := kstate.Addresses(node.NS, "nonexistent0"); err == nil {
		t.Error("Addresses of a missing device: no error")
	}
	t.Logf("kernel state in plan form:\n%s", kstate.Text(t, node.NS))
}

func sortedSets(in []iptables.IPSet) []iptables.IPSet {
	out := append([]iptables.IPSet(nil), in...)
	for i := range out {
		out[i].Entries = iptables.SortEntries(append([]iptables.Entry(nil), out[i].Entries...))
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Name < out[j-1].Name; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
