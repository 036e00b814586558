package iptables_test

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// syncedWithReader is a fake syncer whose full syncs read the sets beside
// the loop, after one Full of the planned sets and IPv4 rules.
func syncedWithReader(t *testing.T) (*iptables.Syncer, *fakeKernel, []iptables.IPSet, []iptables.Ruleset) {
	t.Helper()
	a, k := newFakeSyncer(t)
	a.Reader = k.sets
	rules := []iptables.Ruleset{testRules(iptables.FamilyIPv4)}
	sets := plannedSets()
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	return a, k, sets, rules
}

// TestFullFromKeepsWritesSinceTheRead: partial syncs run between
// BeginFull's read and FullFrom. The entries they wrote are newer than the
// dump and stay as the mirror has them; an entry deleted by hand before
// the read is repaired, and counted, as by Full. The read's iptables-save
// is used unless a chain sync ran meanwhile.
func TestFullFromKeepsWritesSinceTheRead(t *testing.T) {
	a, k, sets, rules := syncedWithReader(t)
	cip := findSet(sets, iptables.SetClusterIP)
	dns, api := cip.Entries[0], cip.Entries[1]
	// Before the read: someone deletes the API server's entry.
	if err := k.sets.Del(*cip, []iptables.Entry{api}); err != nil {
		t.Fatal(err)
	}
	read := a.BeginFull()
	rb, err := read()
	if err != nil {
		t.Fatal(err)
	}
	saves := k.tables[iptables.FamilyIPv4].Execs
	// After the read: a partial sync deletes dns and adds web.
	web := iptables.Entry{IP: netip.MustParseAddr("10.96.0.20"), Protocol: model.TCP, Port: 80}
	after := plannedSets()
	findSet(after, iptables.SetClusterIP).Entries = []iptables.Entry{api, web}
	if err := syncErr(a.Partial(iptables.Desired{Sets: after, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if err := syncErr(a.FullFrom(iptables.Desired{Sets: after, Rules: rules}, rb, nil)); err != nil {
		t.Fatal(err)
	}
	if d := a.LastDrift(); !maps.Equal(d, layer.Drift{iptables.DriftIPSetEntry: 1}) {
		t.Errorf("drift %+v, want the API server's entry alone", d)
	}
	got := k.sets.Sets[iptables.SetClusterIP].Entries
	slices.SortFunc(got, iptables.CompareEntries)
	want := iptables.Normalize(cip.Type, []iptables.Entry{api, web})
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %v, want %v", iptables.SetClusterIP, got, want)
	}
	if slices.Contains(got, dns) {
		t.Errorf("dns's entry, deleted since the read, came back")
	}
	if n := k.tables[iptables.FamilyIPv4].Execs - saves; n != 0 {
		t.Errorf("FullFrom ran %d iptables-save/restore, want none (the read's save, nothing to repair)", n)
	}
	if err := syncErr(a.FullFrom(iptables.Desired{Sets: after, Rules: rules}, rb, nil)); !errors.Is(err, layer.ErrNoRead) {
		t.Errorf("a second FullFrom: %v, want ErrNoRead", err)
	}
	if err := syncErr(a.Full(iptables.Desired{Sets: after, Rules: rules})); err != nil || a.LastDrift().Total() != 0 {
		t.Errorf("Full after FullFrom: %v, drift %+v", err, a.LastDrift())
	}

	// A chain sync during the read (the planned rules changed) makes the
	// read's save stale: FullFrom saves again.
	read = a.BeginFull()
	if rb, err = read(); err != nil {
		t.Fatal(err)
	}
	changed := []iptables.Ruleset{iptables.Rules(iptables.RulesConfig{Family: iptables.FamilyIPv4, MasqueradeBit: 15, ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16")})}
	if err := syncErr(a.Partial(iptables.Desired{Sets: after, Rules: changed})); err != nil {
		t.Fatal(err)
	}
	saves = k.tables[iptables.FamilyIPv4].Execs
	if err := syncErr(a.FullFrom(iptables.Desired{Sets: after, Rules: changed}, rb, nil)); err != nil {
		t.Fatal(err)
	}
	if k.tables[iptables.FamilyIPv4].Execs == saves {
		t.Error("FullFrom used a save older than the chain sync")
	}
	if d := a.LastDrift(); d.Total() != 0 {
		t.Errorf("drift %+v after a chain sync during the read", d)
	}
}

// TestFullFromSortsWritesIntoTheDump: an entry a partial sync added
// during the read, which sorts before what the dump holds, is taken as
// the mirror has it without being counted as drift: the dump with it
// stays sorted for the comparison. The read itself comes back sorted
// (BeginFull sorts it beside the loop), though the kernel lists a hash
// set in hash order.
func TestFullFromSortsWritesIntoTheDump(t *testing.T) {
	a, k := newFakeSyncer(t)
	a.Reader = k.sets
	rules := []iptables.Ruleset{testRules(iptables.FamilyIPv4)}
	sets := plannedSets()
	cip := findSet(sets, iptables.SetClusterIP)
	for i := range 50 {
		cip.Entries = append(cip.Entries, iptables.Entry{IP: netip.AddrFrom4([4]byte{10, 96, 1, byte(i)}), Protocol: model.TCP, Port: 80})
	}
	if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	rb, err := a.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	if d := rb.Sets()[iptables.SetClusterIP]; !slices.IsSortedFunc(d.Entries, iptables.CompareEntries) {
		t.Errorf("the read's %s is not sorted: %v", iptables.SetClusterIP, d.Entries)
	}
	first := iptables.Entry{IP: netip.MustParseAddr("10.0.0.1"), Protocol: model.TCP, Port: 80}
	after := plannedSets()
	findSet(after, iptables.SetClusterIP).Entries = append(slices.Clone(cip.Entries), first)
	if err := syncErr(a.Partial(iptables.Desired{Sets: after, Rules: rules})); err != nil {
		t.Fatal(err)
	}
	if err := syncErr(a.FullFrom(iptables.Desired{Sets: after, Rules: rules}, rb, nil)); err != nil {
		t.Fatal(err)
	}
	if d := a.LastDrift(); d.Total() != 0 {
		t.Errorf("drift %+v, want none: only the proxy wrote", d)
	}
}

// TestReadOfUnchangedSetsKeepsNoEntries: a read of sets that hold what the
// mirror says keeps none of their entries, and the full sync from it
// writes nothing. A set someone replaced with the same entries but
// another maxelem is read whole, counted as drift and replaced back.
func TestReadOfUnchangedSetsKeepsNoEntries(t *testing.T) {
	a, k, sets, rules := syncedWithReader(t)
	rb, err := a.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range sets {
		if ks := rb.Sets()[w.Name]; ks == nil || !ks.Unchanged() || len(ks.Entries) != 0 {
			t.Errorf("%s read as %+v, want unchanged and no entries", w.Name, ks)
		}
	}
	writes := func() int {
		n := 0
		for op, c := range k.sets.Ops {
			if op != "list" {
				n += c
			}
		}
		return n
	}
	before := writes()
	if err := syncErr(a.FullFrom(iptables.Desired{Sets: sets, Rules: rules}, rb, nil)); err != nil || a.LastDrift().Total() != 0 || writes() != before {
		t.Errorf("FullFrom of an unchanged read: %v, drift %+v, %d writes", err, a.LastDrift(), writes()-before)
	}

	cip := findSet(sets, iptables.SetClusterIP)
	ks := k.sets.Sets[iptables.SetClusterIP]
	ks.MaxElem *= 2 // recreated by hand with the same entries
	rb, err = a.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	if got := rb.Sets()[iptables.SetClusterIP]; got.Unchanged() || len(got.Entries) != len(cip.Entries) {
		t.Errorf("the replaced set read as %+v, want its entries", got)
	}
	if err := syncErr(a.FullFrom(iptables.Desired{Sets: sets, Rules: rules}, rb, nil)); err != nil || a.LastDrift()[iptables.DriftIPSet] != 1 {
		t.Errorf("FullFrom: %v, drift %+v, want the set counted", err, a.LastDrift())
	}
	if got := k.sets.Sets[iptables.SetClusterIP].MaxElem; got != ks.MaxElem/2 {
		t.Errorf("maxelem %d after the repair, want %d", got, ks.MaxElem/2)
	}
}
