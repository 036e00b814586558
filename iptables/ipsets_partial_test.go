package iptables_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
)

// Partial skips a set handed on as the very slice the last sync applied
// (BenchmarkPartialSets), but not one whose entries the kernel refused:
// the same slice again retries them.
func TestPartialSameSliceAfterRefusal(t *testing.T) {
	a, k := newFakeSyncer(t)
	sets := plannedSets()
	for i := range sets {
		sets[i].Entries = iptables.SortEntries(sets[i].Entries) // as the planner's
	}
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
		t.Fatal(err)
	}
	k.sets.Ops = map[string]int{}
	if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: nil})); err != nil || len(k.sets.Ops) != 0 {
		t.Fatalf("Partial of the same slices: %v, did %v", err, k.sets.Ops)
	}
	// A new slice with an entry the kernel refuses.
	cl := findSet(sets, iptables.SetClusterIP)
	extra := iptables.Entry{IP: mustAddr("10.96.9.9"), Protocol: model.TCP, Port: 80}
	cl.Entries = iptables.SortEntries(append(slices.Clone(cl.Entries), extra))
	k.sets.Reject = map[string]bool{iptables.SetClusterIP + " 10.96.9.9,tcp:80": true}
	if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: nil})); err == nil {
		t.Fatal("Partial: no error for the refused entry")
	}
	// The kernel takes it now: the same slice again adds it.
	k.sets.Reject = nil
	if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
		t.Fatal(err)
	}
	if got, want := k.sets.SaveText(), wantSave(sets); got != want {
		t.Errorf("sets:\n%s\nwant:\n%s", got, want)
	}
}

// nopSets is a SetKernel that holds nothing and accepts everything: the
// set syncer's own cost, without a kernel's or a fake's.
type nopSets struct{}

func (nopSets) ListAll() (map[string]*iptables.KernelSet, error) {
	return map[string]*iptables.KernelSet{}, nil
}
func (nopSets) Create(iptables.IPSet, uint32) error        { return nil }
func (nopSets) Destroy(string) error                       { return nil }
func (nopSets) Swap(string, string) error                  { return nil }
func (nopSets) Add(iptables.IPSet, []iptables.Entry) error { return nil }
func (nopSets) Del(iptables.IPSet, []iptables.Entry) error { return nil }

// BenchmarkPartialSets is Syncer.Partial of one changed KUBE-LOOP-BACK
// entry among n services' sets (a ClusterIP and an address entry per
// service; ten endpoints per service, one in 50 on this node, so in
// KUBE-LOOP-BACK): one endpoint on this node replaced, the other sets
// handed on unchanged as the planner hands them. The set syncer's own
// cost (nopSets): what is left grows with the one changed set.
func BenchmarkPartialSets(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			a := iptables.NewSyncerForTest(nopSets{}, func(string) (iptables.RuleRunner, error) { return iptablestest.NewFakeRunner(), nil }, nil)
			sets := iptables.EmptySets(iptables.FamilyIPv4)
			var cluster, ips, loop []iptables.Entry
			for s := range n {
				vip := netip.AddrFrom4([4]byte{10, 96, byte(s >> 8), byte(s)})
				cluster = append(cluster, iptables.Entry{IP: vip, Protocol: model.TCP, Port: 80})
				ips = append(ips, iptables.Entry{IP: vip})
				for e := range 10 {
					if k := s*10 + e; k%50 == 0 {
						ep := netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)})
						loop = append(loop, iptables.Entry{IP: ep, Protocol: model.TCP, Port: 8080, Net: netip.PrefixFrom(ep, 32)})
					}
				}
			}
			findSet(sets, iptables.SetClusterIP).Entries = cluster
			findSet(sets, iptables.SetIPVSIPs).Entries = ips
			findSet(sets, iptables.SetLoopBack).Entries = loop
			if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: nil})); err != nil {
				b.Fatal(err)
			}
			changed := slices.Clone(sets)
			moved := slices.Clone(loop)
			ep := mustAddr("10.255.0.1")
			moved[len(moved)/2] = iptables.Entry{IP: ep, Protocol: model.TCP, Port: 8080, Net: netip.PrefixFrom(ep, 32)}
			findSet(changed, iptables.SetLoopBack).Entries = iptables.SortEntries(moved)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				want := changed
				if i%2 == 1 {
					want = sets
				}
				if err := syncErr(a.Partial(iptables.Desired{Sets: want, Rules: nil})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
