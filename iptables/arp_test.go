package iptables_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// fakeARP is a namespace's table arp ipvs-proxy, with the writes that
// changed it.
type fakeARP struct {
	fakeNFT
	st      iptables.ARPState
	reads   int
	builds  []bool // replace, per BuildARP
	updates [][2][]netip.Addr
}

func (f *fakeARP) ReadARP() (iptables.ARPState, error) {
	f.reads++
	st := f.st
	st.VIPs = slices.Clone(st.VIPs)
	return st, nil
}

func (f *fakeARP) BuildARP(replace bool, vips []netip.Addr) error {
	f.builds = append(f.builds, replace)
	f.st = iptables.ARPState{Present: true, Chains: []iptables.ARPChainState{{Name: iptables.ARPChain, Base: true, AcceptPolicy: true}},
		Sets: []string{iptables.ARPSet}, Rules: []string{iptables.ARPChain + ": " + iptables.ARPRuleComment}, VIPs: slices.Clone(vips)}
	f.tables = []iptables.NFTable{iptables.ARPTable}
	return nil
}

func (f *fakeARP) UpdateARP(add, del []netip.Addr) error {
	f.updates = append(f.updates, [2][]netip.Addr{add, del})
	f.st.VIPs = append(slices.DeleteFunc(f.st.VIPs, func(a netip.Addr) bool { return slices.Contains(del, a) }), add...)
	return nil
}

func (f *fakeARP) DeleteTables(ts []iptables.NFTable) error {
	f.st = iptables.ARPState{}
	return f.fakeNFT.DeleteTables(ts)
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range s {
		out = append(out, netip.PrefixFrom(netip.MustParseAddr(a), netip.MustParseAddr(a).BitLen()))
	}
	return out
}

func TestARPVIPs(t *testing.T) {
	got := iptables.ARPVIPs(prefixes("10.96.0.1", "fd00::1", "192.0.2.10"))
	if want := []netip.Addr{mustAddr("10.96.0.1"), mustAddr("192.0.2.10")}; !slices.Equal(got, want) {
		t.Errorf("ARPVIPs: %v, want the IPv4 ones %v", got, want)
	}
}

// TestSyncARP: with --strict-arp-vips the first full sync builds the
// table with the IPv4 VIPs; a partial sync writes only the elements that
// changed, reading nothing; a full sync puts back an element someone
// deleted (one drift), rebuilds the table whose rule someone deleted or
// whose chain policy they made drop (replacing it in one transaction);
// without the option a full sync deletes a table left from before, once.
func TestSyncARP(t *testing.T) {
	a, _ := newFakeSyncer(t)
	k := &fakeARP{}
	a.NFT, a.ARPVIPs = k, true
	if _, err := a.SyncARP(prefixes("10.96.0.1", "fd00::1", "192.0.2.10"), true); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.builds, []bool{false}) || !slices.Equal(k.st.VIPs, []netip.Addr{mustAddr("10.96.0.1"), mustAddr("192.0.2.10")}) {
		t.Fatalf("first full sync: builds %v, elements %v", k.builds, k.st.VIPs)
	}
	reads := k.reads
	if _, err := a.SyncARP(prefixes("10.96.0.1", "10.96.0.2"), false); err != nil {
		t.Fatal(err)
	}
	if k.reads != reads || len(k.updates) != 1 || !slices.Equal(k.updates[0][0], []netip.Addr{mustAddr("10.96.0.2")}) ||
		!slices.Equal(k.updates[0][1], []netip.Addr{mustAddr("192.0.2.10")}) {
		t.Fatalf("partial sync: %d reads, updates %v; want add 10.96.0.2, delete 192.0.2.10, no read", k.reads-reads, k.updates)
	}
	if _, err := a.SyncARP(prefixes("10.96.0.1", "10.96.0.2"), false); err != nil || len(k.updates) != 1 {
		t.Fatalf("partial sync without change: %v, updates %v", err, k.updates)
	}

	k.st.VIPs = k.st.VIPs[1:] // someone deletes 10.96.0.1
	if _, err := a.SyncARP(prefixes("10.96.0.1", "10.96.0.2"), true); err != nil {
		t.Fatal(err)
	}
	if d := a.LastDrift(); d[iptables.DriftARPTable] != 1 || !slices.Contains(k.st.VIPs, mustAddr("10.96.0.1")) {
		t.Errorf("full sync after an element was deleted: drift %+v, elements %v", d, k.st.VIPs)
	}
	for name, tamper := range map[string]func(*iptables.ARPState){
		"rule deleted": func(s *iptables.ARPState) { s.Rules = nil },
		"policy drop":  func(s *iptables.ARPState) { s.Chains[0].AcceptPolicy = false },
	} {
		tamper(&k.st)
		k.builds = nil
		if _, err := a.SyncARP(prefixes("10.96.0.1", "10.96.0.2"), true); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(k.builds, []bool{true}) || len(k.st.VIPs) != 2 {
			t.Errorf("%s: builds %v (want one, replacing), elements %v", name, k.builds, k.st.VIPs)
		}
	}

	a.ARPVIPs = false
	if _, err := a.SyncARP(prefixes("10.96.0.1"), false); err != nil || !k.st.Present {
		t.Fatalf("a partial sync without the option touched the table: %v", err)
	}
	for range 2 {
		if _, err := a.SyncARP(prefixes("10.96.0.1"), true); err != nil {
			t.Fatal(err)
		}
	}
	if k.st.Present || len(k.deletes) != 1 {
		t.Errorf("full syncs without the option: table present %v, deletes %v; want it deleted once", k.st.Present, k.deletes)
	}
}

// TestCleanupARP: cleanup deletes the table whether or not the option is
// on, and a second cleanup finds nothing.
func TestCleanupARP(t *testing.T) {
	a, _ := newFakeSyncer(t)
	k := &fakeARP{}
	a.NFT, a.ARPVIPs = k, true
	if _, err := a.SyncARP(prefixes("10.96.0.1"), true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.CleanupARP(); err != nil {
			t.Fatal(err)
		}
	}
	if k.st.Present || len(k.deletes) != 1 {
		t.Errorf("after cleanup: present %v, deletes %v", k.st.Present, k.deletes)
	}
}
