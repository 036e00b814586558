//go:build !kernel

// Not in the kernel test binary: under the VM's TCG this fake test of
// 65,636 entries costs half a minute, and TestKernelSetGrowsThroughSwap
// proves the same there against the real kernel.

package iptables_test

import (
	"fmt"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// A set the plan outgrows is swapped for a larger one, by a partial sync
// from the mirror alone (no dump) as well as by a full one; a full sync
// gives it kube-proxy's shape back once 65536 holds the plan again.
func TestSetGrowsAndShrinksThroughSwap(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("full=%v", full), func(t *testing.T) {
			a, k := newFakeSyncer(t)
			loadKubeProxy(t, k)
			sets, rules := kubeProxyPlan(t)
			if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
				t.Fatal(err)
			}
			lb := findSet(sets, iptables.SetLoopBack)
			small := lb.Entries
			lb.Entries = loopBack(iptables.KubeProxyMaxElem + 100)
			k.sets.Ops = map[string]int{}
			sync := func(s []iptables.IPSet) error { return syncErr(a.Partial(iptables.Desired{Sets: s, Rules: rules})) }
			if full {
				sync = func(s []iptables.IPSet) error { return syncErr(a.Full(iptables.Desired{Sets: s, Rules: rules})) }
			}
			if err := sync(sets); err != nil {
				t.Fatal(err)
			}
			ks := k.sets.Sets[iptables.SetLoopBack]
			if ks.MaxElem != 131072 || len(ks.Entries) != iptables.KubeProxyMaxElem+100 || k.sets.Ops["swap"] != 1 {
				t.Errorf("after growth: maxelem %d, %d entries, ops %v; want 131072, %d, one swap", ks.MaxElem, len(ks.Entries), k.sets.Ops, iptables.KubeProxyMaxElem+100)
			}
			if !full && k.sets.Ops["list"] != 0 {
				t.Errorf("partial growth dumped the sets")
			}
			if n := k.sets.References(iptables.SetLoopBack); n != 1 {
				t.Errorf("%s has %d references, want KUBE-POSTROUTING's 1", iptables.SetLoopBack, n)
			}
			// Growing within the new size is a plain add.
			lb.Entries = loopBack(iptables.KubeProxyMaxElem + 101)
			k.sets.Ops = map[string]int{}
			if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
				t.Fatal(err)
			}
			if k.sets.Ops["swap"] != 0 || k.sets.Ops["add"] != 1 {
				t.Errorf("growth within maxelem did %v, want one add", k.sets.Ops)
			}
			// Back to a size 65536 holds: a partial sync keeps the set, the
			// next full one swaps in kube-proxy's shape.
			lb.Entries = small
			if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
				t.Fatal(err)
			}
			if k.sets.Sets[iptables.SetLoopBack].MaxElem != 131072 {
				t.Errorf("a partial sync shrank the set")
			}
			if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
				t.Fatal(err)
			}
			if got, want := k.sets.SaveText(), wantSave(sets); got != want {
				t.Errorf("sets:\n%s\nwant:\n%s", got, want)
			}
			if k.sets.Sets[iptables.SetLoopBack].MaxElem != iptables.KubeProxyMaxElem {
				t.Errorf("full sync left maxelem %d, want kube-proxy's %d", k.sets.Sets[iptables.SetLoopBack].MaxElem, iptables.KubeProxyMaxElem)
			}
			if d := a.LastDrift(); d.Total() != 0 {
				t.Errorf("the proxy's own swaps counted as drift %+v", d)
			}
			kubeProxyAccepts(t, k.sets)
		})
	}
}
