//go:build kernel

package iptables_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
)

// TestKernelWalkAndList: the kernel's set walk hands keep every entry
// ListAll lists and keeps those kept only, with each set's header; List
// reads one set as ListAll does, and a missing one is ErrSetNotFound; and
// a full sync's read of the sets a Full left keeps none of their entries,
// while a set changed behind the syncer's back is read whole.
func TestKernelWalkAndList(t *testing.T) {
	inNetns(t, func() {
		sets, rules := dualStackPlan()
		a, err := kernel.NewSyncer(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		w, ok := a.SetKernel().(iptables.SetWalker)
		if !ok {
			t.Fatalf("the kernel's sets (%T) are no SetWalker", a.SetKernel())
		}
		all, err := a.SetKernel().ListAll()
		if err != nil {
			t.Fatal(err)
		}
		handed := map[string]int{}
		walked, err := w.WalkAll(func(ks *iptables.KernelSet, e iptables.Entry) bool {
			if ks.Type == "" {
				t.Errorf("%s: an entry handed before its set's type", ks.Name)
			}
			handed[ks.Name]++
			return ks.Name == iptables.SetClusterIP
		})
		if err != nil {
			t.Fatal(err)
		}
		sorted := func(es []iptables.Entry) []iptables.Entry {
			return slices.SortedFunc(slices.Values(es), iptables.CompareEntries)
		}
		for name, ks := range all {
			wk := walked[name]
			if wk == nil || handed[name] != len(ks.Entries) || wk.Type != ks.Type || wk.Family != ks.Family || wk.MaxElem != ks.MaxElem {
				t.Errorf("%s: walked %+v with %d entries handed, listed %d entries of %s %s maxelem %d", name, wk, handed[name], len(ks.Entries), ks.Type, ks.Family, ks.MaxElem)
				continue
			}
			if keep := name == iptables.SetClusterIP; keep != (len(wk.Entries) > 0) || keep && !slices.Equal(sorted(wk.Entries), sorted(ks.Entries)) {
				t.Errorf("%s: walk kept %v", name, wk.Entries)
			}
			one, err := w.List(name)
			if err != nil || one.Type != ks.Type || !slices.Equal(sorted(one.Entries), sorted(ks.Entries)) {
				t.Errorf("ipset list %s: %+v %v, want %+v", name, one, err, ks)
			}
		}
		if len(all[iptables.SetClusterIP].Entries) == 0 {
			t.Fatalf("%s is empty: the walk's keep is not tested", iptables.SetClusterIP)
		}
		if _, err := w.List("KUBE-NO-SUCH-SET"); !errors.Is(err, iptables.ErrSetNotFound) {
			t.Errorf("ipset list of a missing set: %v, want ErrSetNotFound", err)
		}

		have, err := iptables.ListCompared(a.SetKernel(), a.SetDigests())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if ks := have[s.Name]; ks == nil || !ks.Unchanged() || len(ks.Entries) != 0 {
				t.Errorf("%s read as %+v, want unchanged without entries", s.Name, ks)
			}
		}
		cip := findSet(sets, iptables.SetClusterIP)
		if err := a.SetKernel().Del(*cip, cip.Entries[:1]); err != nil {
			t.Fatal(err)
		}
		have, err = iptables.ListCompared(a.SetKernel(), a.SetDigests())
		if err != nil {
			t.Fatal(err)
		}
		if ks := have[iptables.SetClusterIP]; ks.Unchanged() || len(ks.Entries) != len(cip.Entries)-1 {
			t.Errorf("%s with an entry deleted by hand read as %+v", iptables.SetClusterIP, ks)
		}
	})
}
