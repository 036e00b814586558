package addrmgr_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// A read beside the sync that is older than the binds and unbinds made
// while it ran keeps the manager's view of those addresses; what others
// changed is drift, repaired by the sync that follows.
func TestDumpFromKeepsWritesDuringTheRead(t *testing.T) {
	link := addrmgrtest.NewFakeLink(pfx("10.96.0.1/32", "10.96.0.2/32")...)
	m := addrmgr.NewManager(link, setGuard{}, nil)
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	reader := addrmgrtest.NewFakeLink()
	m.SetReader(reader)
	read := m.BeginFull()
	// The read dumps the reader's socket: the device as it was before the
	// writes below, with an address someone else added.
	reader.Put(pfx("10.96.0.1/32")[0])
	reader.Put(pfx("10.96.0.2/32")[0])
	reader.Put(pfx("10.96.0.66/32")[0])
	got, err := read()
	if err != nil {
		t.Fatal(err)
	}
	// Meanwhile a partial sync binds .3 and unbinds .2.
	if res := m.Bind(pfx("10.96.0.1/32", "10.96.0.3/32"), nil); res.Bound != 1 {
		t.Fatalf("bind: %+v", res)
	}
	if res := m.Unbind(pfx("10.96.0.1/32", "10.96.0.3/32", "10.96.0.66/32")); res.Unbound != 1 {
		t.Fatalf("unbind: %+v", res)
	}
	view, err := m.DumpFrom(got)
	if err != nil {
		t.Fatal(err)
	}
	if want := pfx("10.96.0.1/32", "10.96.0.3/32", "10.96.0.66/32"); !slices.Equal(view, want) {
		t.Fatalf("view %v, want %v", view, want)
	}
	if !m.Bound(pfx("10.96.0.3/32")[0].Addr()) || m.Bound(pfx("10.96.0.2/32")[0].Addr()) {
		t.Fatal("a write made during the read lost to the older read")
	}
	if m.Drift() != 1 {
		t.Fatalf("drift %d, want 1 (10.96.0.66 added by someone else)", m.Drift())
	}
	// The read is over.
	if _, err := m.DumpFrom(got); !errors.Is(err, layer.ErrNoRead) {
		t.Fatalf("second DumpFrom: %v, want ErrNoRead", err)
	}
	if link.Dumps != 1 {
		t.Fatalf("the manager's own link dumped %d times, want 1 (the read has its own socket)", link.Dumps)
	}
}

// A Dump during the read (a partial sync that did not trust its view) is
// newer than the read: DumpFrom keeps what it found and counts no drift.
func TestDumpFromAfterDumpKeepsTheNewerDump(t *testing.T) {
	link := addrmgrtest.NewFakeLink(pfx("10.96.0.1/32")...)
	m := addrmgr.NewManager(link, setGuard{}, nil)
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	read := m.BeginFull()
	got, err := read() // the device holds 10.96.0.1 alone
	if err != nil {
		t.Fatal(err)
	}
	link.Put(pfx("10.96.0.7/32")[0])
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	if m.Drift() != 1 {
		t.Fatalf("the dump's drift %d, want 1", m.Drift())
	}
	view, err := m.DumpFrom(got)
	if err != nil {
		t.Fatal(err)
	}
	if want := pfx("10.96.0.1/32", "10.96.0.7/32"); !slices.Equal(view, want) {
		t.Fatalf("view %v, want %v: the older read replaced the newer dump", view, want)
	}
	if m.Drift() != 0 {
		t.Fatalf("drift %d counted twice", m.Drift())
	}
}

func TestDumpFromWithoutBeginDump(t *testing.T) {
	m := addrmgr.NewManager(addrmgrtest.NewFakeLink(), setGuard{}, nil)
	if _, err := m.DumpFrom(nil); !errors.Is(err, layer.ErrNoRead) {
		t.Fatalf("DumpFrom: %v, want ErrNoRead", err)
	}
}

// A read that finds the device as the view has it, but for an address
// bound and one unbound during the read, leaves the view as it is: no
// drift, the binds made meanwhile kept.
func TestDumpFromUnchangedDevice(t *testing.T) {
	link := addrmgrtest.NewFakeLink(pfx("10.96.0.1/32", "10.96.0.2/32")...)
	m := addrmgr.NewManager(link, setGuard{}, nil)
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	read := m.BeginFull()
	got, err := read()
	if err != nil {
		t.Fatal(err)
	}
	m.Bind(pfx("10.96.0.1/32", "10.96.0.3/32"), nil)
	m.Unbind(pfx("10.96.0.1/32", "10.96.0.3/32"))
	view, err := m.DumpFrom(got)
	if err != nil {
		t.Fatal(err)
	}
	if want := pfx("10.96.0.1/32", "10.96.0.3/32"); !slices.Equal(view, want) || m.Drift() != 0 {
		t.Fatalf("view %v, drift %d; want %v and none", view, m.Drift(), want)
	}
}

// The read sorts what it found beside the loop, and DumpFrom hands a read
// that finds the view unchanged back as the view: no sort of 10,000
// addresses on the loop.
func TestDumpFromUnchangedDeviceIsTheSortedRead(t *testing.T) {
	var ps []netip.Prefix
	for i := range 200 {
		a := netip.AddrFrom4([4]byte{10, 96, byte(i / 100), byte(i % 100)})
		ps = append(ps, netip.PrefixFrom(a, 32))
	}
	m := addrmgr.NewManager(addrmgrtest.NewFakeLink(ps...), setGuard{}, nil)
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	got, err := m.BeginFull()()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(got, model.ComparePrefix) {
		t.Fatalf("the read is not sorted: %v", got)
	}
	view, err := m.DumpFrom(got)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(view, m.Current()) || &view[0] != &got[0] {
		t.Fatalf("view %v: want the read itself, equal to the manager's", view)
	}
}
