package iptables

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

func TestMaxElemFor(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want uint32
	}{
		{0, 65536}, {1, 65536}, {65536, 65536}, {65537, 131072}, {100_000, 131072},
		{131072, 131072}, {131073, 262144}, {1 << 31, 1 << 31}, {1<<31 + 1, 1 << 31},
	} {
		if got := MaxElemFor(tt.n); got != tt.want {
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
		if got := MaxElemHolds(tt.have, tt.n); got != tt.want {
			t.Errorf("MaxElemHolds(%d, %d) = %v, want %v", tt.have, tt.n, got, tt.want)
		}
	}
}

// kubeProxyAccepts is kube-proxy's ensureIPSet for every set of its
// ipsetInfo in both families: `ipset create ... -exist`, which fails on a
// set of another shape and then stops its whole sync.
func kubeProxyAccepts(t *testing.T, f *FakeSets) {
	t.Helper()
	for _, fam := range []string{FamilyIPv4, FamilyIPv6} {
		for _, spec := range SetSpecs {
			if !spec.KubeProxy() {
				continue
			}
			if err := f.createExist(SetName(spec.Name, fam), spec.Type, fam); err != nil {
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
	k.sets.ops = map[string]int{}
	if err := a.Full(sets, rules); err != nil {
		t.Fatalf("first Full over kube-proxy's state: %v", err)
	}
	own := 0
	for _, s := range SetSpecs {
		if !s.KubeProxy() {
			own++
		}
	}
	if k.sets.ops["swap"] != 0 || k.sets.ops["create"] != own {
		t.Errorf("adoption created %d and swapped %d sets (ops %v), want %d created (the proxy's own) and none swapped",
			k.sets.ops["create"], k.sets.ops["swap"], k.sets.ops, own)
	}
	if n := k.sets.ops["destroy"]; n != len(SetSpecs)-own {
		t.Errorf("%d destroys, want %d (kube-proxy's KUBE-6-* sets only)", n, len(SetSpecs)-own)
	}
	if got, want := k.sets.save(), wantSave(sets); got != want {
		t.Errorf("sets after takeover:\n%s\nwant:\n%s", got, want)
	}
	checkChains(t, k.tables[FamilyIPv4], rules[0])
	checkTakenOverChains(t, k.tables[FamilyIPv4].dump(), k.tables[FamilyIPv6].dump())

	// Steady state: the next Full looks at ip6tables once more, finds it
	// clear, and from then on a Full only saves the IPv4 tables.
	for i, wantExecs := range []int{2, 1} {
		k.sets.ops = map[string]int{}
		before := k.tables[FamilyIPv4].execs + k.tables[FamilyIPv6].execs
		if err := a.Full(sets, rules); err != nil {
			t.Fatal(err)
		}
		if n := k.tables[FamilyIPv4].execs + k.tables[FamilyIPv6].execs - before; n != wantExecs {
			t.Errorf("Full %d after the takeover ran %d iptables binaries, want %d saves", i+2, n, wantExecs)
		}
		if want := map[string]int{"list": 1}; !equalOps(k.sets.ops, want) {
			t.Errorf("Full %d after the takeover did %v, want %v", i+2, k.sets.ops, want)
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
		set    KernelSet
		differ string
	}{
		{"maxelem of an older ipvs-proxy", KernelSet{Type: TypeHashIPPort, Family: FamilyIPv4, MaxElem: 1 << 20}, "maxelem"},
		{"maxelem too small", KernelSet{Type: TypeHashIPPort, Family: FamilyIPv4, MaxElem: 1}, "maxelem"},
		{"comment extension", KernelSet{Type: TypeHashIPPort, Family: FamilyIPv4, MaxElem: 65536, CadtFlags: 1 << 2}, "extensions"},
		{"timeout", KernelSet{Type: TypeHashIPPort, Family: FamilyIPv4, MaxElem: 65536, Timeout: 60}, "extensions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, k := newFakeSyncer(t)
			ks := tt.set
			ks.Name, ks.Entries = SetClusterIP, []Entry{{IP: mustAddr("10.96.9.9"), Protocol: model.TCP, Port: 9}}
			k.sets.sets[SetClusterIP] = &ks
			k.tables[FamilyIPv4].set("nat", "USER", "-m set --match-set "+SetClusterIP+" dst,dst -j RETURN")
			if got := mismatch(&ks, findSet(plannedSets(), SetClusterIP), 2).String(); got != tt.differ {
				t.Errorf("mismatch names %q, want %q", got, tt.differ)
			}
			sets := plannedSets()
			if err := a.Full(sets, nil); err != nil {
				t.Fatal(err)
			}
			if k.sets.ops["swap"] != 1 {
				t.Errorf("ops %v, want one swap", k.sets.ops)
			}
			if got, want := k.sets.save(), wantSave(sets); got != want {
				t.Errorf("sets:\n%s\nwant:\n%s", got, want)
			}
			if n := k.sets.references(SetClusterIP); n != 1 {
				t.Errorf("%s has %d references after the swap, want the rule's 1", SetClusterIP, n)
			}
			if k.sets.sets[SwapSetName] != nil {
				t.Errorf("%s left behind", SwapSetName)
			}
			kubeProxyAccepts(t, k.sets)
		})
	}
}

// A set of another type or family cannot be swapped and is held by a rule:
// that set's error says which attribute differs; every other set syncs.
func TestTakeoverTypeOrFamilyMismatchIsPerSet(t *testing.T) {
	a, k := newFakeSyncer(t)
	k.sets.sets[SetClusterIP] = &KernelSet{Name: SetClusterIP, Type: TypeHashIP, Family: FamilyIPv4, MaxElem: 65536}
	k.sets.sets[SetIPVSIPs] = &KernelSet{Name: SetIPVSIPs, Type: TypeHashIP, Family: FamilyIPv6, MaxElem: 65536}
	f := k.tables[FamilyIPv4]
	f.set("filter", "USER", "-m set --match-set "+SetClusterIP+" dst -j RETURN", "-m set --match-set "+SetIPVSIPs+" dst -j RETURN")
	sets := plannedSets()
	err := a.Full(sets, nil)
	if !errors.Is(err, ErrSetMismatch) || !errors.Is(err, ErrSetReferenced) {
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
	var others []IPSet
	for _, s := range sets {
		if s.Name != SetClusterIP && s.Name != SetIPVSIPs {
			others = append(others, s)
		}
	}
	got := k.sets.save()
	for line := range strings.Lines(wantSave(others)) {
		if !strings.Contains(got, line) {
			t.Errorf("set line %q missing: the other sets were not synced", line)
		}
	}
	// Unreferenced, the same sets are replaced at the next Full.
	f.set("filter", "USER")
	if err := a.Full(sets, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := k.sets.save(), wantSave(sets); got != want {
		t.Errorf("sets:\n%s\nwant:\n%s", got, want)
	}
}

// The swap set a crash left is destroyed by the next Full and by Cleanup.
func TestSwapSetLeftByCrash(t *testing.T) {
	a, k := newFakeSyncer(t)
	_ = k.sets.Create(IPSet{Name: SwapSetName, Type: TypeHashIP, Family: FamilyIPv6}, 8)
	if err := a.Full(plannedSets(), nil); err != nil {
		t.Fatal(err)
	}
	if k.sets.sets[SwapSetName] != nil {
		t.Errorf("Full left %s", SwapSetName)
	}
	_ = k.sets.Create(IPSet{Name: SwapSetName, Type: TypeHashIP, Family: FamilyIPv6}, 8)
	if err := a.Cleanup(EmptySets(FamilyIPv4), nil); err != nil {
		t.Fatal(err)
	}
	if len(k.sets.sets) != 0 {
		t.Errorf("Cleanup left %v", slices.Collect(mapKeys(k.sets.sets)))
	}
}

// kube-proxy's leftovers that a chain of someone else still uses stay,
// without an error: KUBE-IPVS-OUT-FILTER jumped to from a user's chain, a
// KUBE-6-* set matched by a user's ip6tables rule.
func TestLeftoversHeldByOthersStay(t *testing.T) {
	a, k := newFakeSyncer(t)
	loadKubeProxy(t, k)
	k.tables[FamilyIPv4].set("filter", "USER-OUT", "-j "+ChainIPVSOutFilter)
	k.tables[FamilyIPv6].set("filter", "USER-6", "-m set --match-set KUBE-6-CLUSTER-IP dst,dst -j RETURN")
	sets, rules := kubeProxyPlan(t)
	if err := a.Full(sets, rules); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.tables[FamilyIPv4].tables["filter"][ChainIPVSOutFilter]; !ok {
		t.Errorf("%s removed though USER-OUT jumps to it", ChainIPVSOutFilter)
	}
	if k.sets.sets["KUBE-6-CLUSTER-IP"] == nil {
		t.Errorf("KUBE-6-CLUSTER-IP destroyed though USER-6 matches it")
	}
	if k.sets.sets["KUBE-6-LOOP-BACK"] != nil {
		t.Errorf("KUBE-6-LOOP-BACK, unused, not destroyed")
	}
	checkChains(t, k.tables[FamilyIPv4], rules[0])
}
