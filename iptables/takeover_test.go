package iptables_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
)

func TestMaxElemFor(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want uint32
	}{
		{0, 65536}, {1, 65536}, {65536, 65536}, {65537, 131072}, {100_000, 131072},
		{131072, 131072}, {131073, 262144}, {1 << 31, 1 << 31}, {1<<31 + 1, 1 << 31},
	} {
		if got := iptables.MaxElemFor(tt.n); got != tt.want {
			t.Errorf("MaxElemFor(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
	for _, tt := range []struct {
		have uint32
		n    int
		want bool
	}{
		{65536, 10, true}, {1 << 20, 10, false}, {1024, 10, false}, {0, 10, true},
		{65536, 65537, false}, {131072, 65537, true}, {1 << 20, 100_000, true}, {131072, 131073, false},
	} {
		if got := iptables.MaxElemHolds(tt.have, tt.n); got != tt.want {
			t.Errorf("MaxElemHolds(%d, %d) = %v, want %v", tt.have, tt.n, got, tt.want)
		}
	}
}

// kubeProxyAccepts is kube-proxy's ensureIPSet for every set of its
// ipsetInfo in both families: `ipset create ... -exist`, which fails on a
// set of another shape and then stops its whole sync.
func kubeProxyAccepts(t *testing.T, f *iptablestest.FakeSets) {
	t.Helper()
	for _, fam := range []string{iptables.FamilyIPv4, iptables.FamilyIPv6} {
		for _, spec := range iptables.SetSpecs {
			if !spec.KubeProxy() {
				continue
			}
			if err := f.CreateExist(iptables.SetName(spec.Name, fam), spec.Type, fam); err != nil {
				t.Errorf("kube-proxy after the proxy: %v", err)
			}
		}
	}
}

// The takeover: kube-proxy's sets (maxelem 65536, held by its rules)
// are adopted in place, entries diffed; its chains of planned names are
// rewritten; KUBE-IPVS-OUT-FILTER and its jump go; on a node planned IPv4
// only its ip6tables chains go and then its KUBE-6-* sets; the kubelet's
// KUBE-KUBELET-CANARY stays; kube-proxy can take the node back.
func TestTakeoverAdoptsKubeProxyState(t *testing.T) {
	a, k := newFakeSyncer(t)
	loadKubeProxy(t, k)
	sets, rules := kubeProxyPlan(t)
	k.sets.Ops = map[string]int{}
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatalf("first Full over kube-proxy's state: %v", err)
	}
	own := 0
	for _, s := range iptables.SetSpecs {
		if !s.KubeProxy() {
			own++
		}
	}
	if k.sets.Ops["swap"] != 0 || k.sets.Ops["create"] != own {
		t.Errorf("adoption created %d and swapped %d sets (ops %v), want %d created (the proxy's own) and none swapped",
			k.sets.Ops["create"], k.sets.Ops["swap"], k.sets.Ops, own)
	}
	if n := k.sets.Ops["destroy"]; n != len(iptables.SetSpecs)-own {
		t.Errorf("%d destroys, want %d (kube-proxy's KUBE-6-* sets only)", n, len(iptables.SetSpecs)-own)
	}
	if got, want := k.sets.SaveText(), wantSave(sets); got != want {
		t.Errorf("sets after takeover:\n%s\nwant:\n%s", got, want)
	}
	checkChains(t, k.tables[iptables.FamilyIPv4], rules[0])
	checkTakenOverChains(t, k.tables[iptables.FamilyIPv4].Dump(), k.tables[iptables.FamilyIPv6].Dump())

	// Steady state: the next Full looks at ip6tables once more, finds it
	// clear, and from then on a Full only saves the IPv4 tables.
	for i, wantExecs := range []int{2, 1} {
		k.sets.Ops = map[string]int{}
		before := k.tables[iptables.FamilyIPv4].Execs + k.tables[iptables.FamilyIPv6].Execs
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		if n := k.tables[iptables.FamilyIPv4].Execs + k.tables[iptables.FamilyIPv6].Execs - before; n != wantExecs {
			t.Errorf("Full %d after the takeover ran %d iptables binaries, want %d saves", i+2, n, wantExecs)
		}
		if want := map[string]int{"list": 1}; !equalOps(k.sets.Ops, want) {
			t.Errorf("Full %d after the takeover did %v, want %v", i+2, k.sets.Ops, want)
		}
		if d := a.LastDrift(); d.Total() != 0 {
			t.Errorf("Full %d after the takeover found drift %+v", i+2, d)
		}
	}
	kubeProxyAccepts(t, k.sets)
}

// A set of the planned type and family but another maxelem, range or
// extensions, held by a rule, is swapped for one of kube-proxy's shape:
// no error, the rule's reference holds, the swap set is gone.
func TestTakeoverSwapsSetOfAnotherShape(t *testing.T) {
	for _, tt := range []struct {
		name   string
		set    iptables.KernelSet
		differ string
	}{
		{"maxelem of an older ipvs-proxy", iptables.KernelSet{Type: iptables.TypeHashIPPort, Family: iptables.FamilyIPv4, MaxElem: 1 << 20}, "maxelem"},
		{"maxelem too small", iptables.KernelSet{Type: iptables.TypeHashIPPort, Family: iptables.FamilyIPv4, MaxElem: 1}, "maxelem"},
		{"comment extension", iptables.KernelSet{Type: iptables.TypeHashIPPort, Family: iptables.FamilyIPv4, MaxElem: 65536, CadtFlags: 1 << 2}, "extensions"},
		{"timeout", iptables.KernelSet{Type: iptables.TypeHashIPPort, Family: iptables.FamilyIPv4, MaxElem: 65536, Timeout: 60}, "extensions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, k := newFakeSyncer(t)
			ks := tt.set
			ks.Name, ks.Entries = iptables.SetClusterIP, []iptables.Entry{{IP: mustAddr("10.96.9.9"), Protocol: model.TCP, Port: 9}}
			k.sets.Sets[iptables.SetClusterIP] = &ks
			k.tables[iptables.FamilyIPv4].SetChain("nat", "USER", "-m set --match-set "+iptables.SetClusterIP+" dst,dst -j RETURN")
			if got := iptables.Mismatch(&ks, findSet(plannedSets(), iptables.SetClusterIP), 2).String(); got != tt.differ {
				t.Errorf("mismatch names %q, want %q", got, tt.differ)
			}
			sets := plannedSets()
			if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
				t.Fatal(err)
			}
			if k.sets.Ops["swap"] != 1 {
				t.Errorf("ops %v, want one swap", k.sets.Ops)
			}
			if got, want := k.sets.SaveText(), wantSave(sets); got != want {
				t.Errorf("sets:\n%s\nwant:\n%s", got, want)
			}
			if n := k.sets.References(iptables.SetClusterIP); n != 1 {
				t.Errorf("%s has %d references after the swap, want the rule's 1", iptables.SetClusterIP, n)
			}
			if k.sets.Sets[iptables.SwapSetName] != nil {
				t.Errorf("%s left behind", iptables.SwapSetName)
			}
			kubeProxyAccepts(t, k.sets)
		})
	}
}

// A set of another type or family cannot be swapped and is held by a rule:
// that set's error says which attribute differs; every other set syncs.
func TestTakeoverTypeOrFamilyMismatchIsPerSet(t *testing.T) {
	a, k := newFakeSyncer(t)
	k.sets.Sets[iptables.SetClusterIP] = &iptables.KernelSet{Name: iptables.SetClusterIP, Type: iptables.TypeHashIP, Family: iptables.FamilyIPv4, MaxElem: 65536}
	k.sets.Sets[iptables.SetIPVSIPs] = &iptables.KernelSet{Name: iptables.SetIPVSIPs, Type: iptables.TypeHashIP, Family: iptables.FamilyIPv6, MaxElem: 65536}
	f := k.tables[iptables.FamilyIPv4]
	f.SetChain("filter", "USER", "-m set --match-set "+iptables.SetClusterIP+" dst -j RETURN", "-m set --match-set "+iptables.SetIPVSIPs+" dst -j RETURN")
	sets := plannedSets()
	err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil}))
	if !errors.Is(err, iptables.ErrSetMismatch) || !errors.Is(err, iptables.ErrSetReferenced) {
		t.Fatalf("Full error %v, want ErrSetMismatch and ErrSetReferenced", err)
	}
	for _, want := range []string{
		"ipset KUBE-CLUSTER-IP: the kernel's is hash:ip family inet maxelem 65536, the plan needs hash:ip,port family inet maxelem 65536: type differs",
		"ipset KUBE-IPVS-IPS: the kernel's is hash:ip family inet6 maxelem 65536, the plan needs hash:ip family inet maxelem 65536: family differs",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	var others []iptables.IPSet
	for _, s := range sets {
		if s.Name != iptables.SetClusterIP && s.Name != iptables.SetIPVSIPs {
			others = append(others, s)
		}
	}
	got := k.sets.SaveText()
	for line := range strings.Lines(wantSave(others)) {
		if !strings.Contains(got, line) {
			t.Errorf("set line %q missing: the other sets were not synced", line)
		}
	}
	// Unreferenced, the same sets are replaced at the next Full.
	f.SetChain("filter", "USER")
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if got, want := k.sets.SaveText(), wantSave(sets); got != want {
		t.Errorf("sets:\n%s\nwant:\n%s", got, want)
	}
}

// The swap set a crash left is destroyed by the next Full and by Cleanup.
func TestSwapSetLeftByCrash(t *testing.T) {
	a, k := newFakeSyncer(t)
	_ = k.sets.Create(iptables.IPSet{Name: iptables.SwapSetName, Type: iptables.TypeHashIP, Family: iptables.FamilyIPv6}, 8)
	if err := syncErr(a.Full(iptables.Desired{Sets: plannedSets(), Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if k.sets.Sets[iptables.SwapSetName] != nil {
		t.Errorf("Full left %s", iptables.SwapSetName)
	}
	_ = k.sets.Create(iptables.IPSet{Name: iptables.SwapSetName, Type: iptables.TypeHashIP, Family: iptables.FamilyIPv6}, 8)
	if err := syncErr(a.Cleanup(iptables.Desired{Sets: iptables.EmptySets(iptables.FamilyIPv4), Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if len(k.sets.Sets) != 0 {
		t.Errorf("Cleanup left %v", slices.Collect(mapKeys(k.sets.Sets)))
	}
}

// kube-proxy's leftovers that a chain of someone else still uses stay,
// without an error: KUBE-IPVS-OUT-FILTER jumped to from a user's chain, a
// KUBE-6-* set matched by a user's ip6tables rule.
func TestLeftoversHeldByOthersStay(t *testing.T) {
	a, k := newFakeSyncer(t)
	loadKubeProxy(t, k)
	k.tables[iptables.FamilyIPv4].SetChain("filter", "USER-OUT", "-j "+iptables.ChainIPVSOutFilter)
	k.tables[iptables.FamilyIPv6].SetChain("filter", "USER-6", "-m set --match-set KUBE-6-CLUSTER-IP dst,dst -j RETURN")
	sets, rules := kubeProxyPlan(t)
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.tables[iptables.FamilyIPv4].Tables["filter"][iptables.ChainIPVSOutFilter]; !ok {
		t.Errorf("%s removed though USER-OUT jumps to it", iptables.ChainIPVSOutFilter)
	}
	if k.sets.Sets["KUBE-6-CLUSTER-IP"] == nil {
		t.Errorf("KUBE-6-CLUSTER-IP destroyed though USER-6 matches it")
	}
	if k.sets.Sets["KUBE-6-LOOP-BACK"] != nil {
		t.Errorf("KUBE-6-LOOP-BACK, unused, not destroyed")
	}
	checkChains(t, k.tables[iptables.FamilyIPv4], rules[0])
}
