package ipvs_test

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

func TestFileJournalRoundTrip(t *testing.T) {
	dir := t.TempDir()
	j := ipvs.NewFileJournal(filepath.Join(dir, "state"))
	addrs, keys, err := j.Load()
	if err != nil || addrs != nil || keys != nil {
		t.Fatalf("missing journal: %v %v %v", addrs, keys, err)
	}
	wantAddrs := []netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("fd00::7")}
	wantKeys := []ipvs.Key{
		{Protocol: model.TCP, Address: nodeIP, Port: 80},
		{Protocol: model.UDP, Address: netip.MustParseAddr("fd00::a"), Port: 53},
		{Protocol: model.SCTP, Address: nodeIP, Port: 9},
	}
	// Unsorted in, sorted on disk and back.
	if err := j.Save([]netip.Addr{wantAddrs[1], wantAddrs[0]}, []ipvs.Key{wantKeys[2], wantKeys[0], wantKeys[1]}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(j.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# ipvs-proxy: what this node's proxy owns that kube-ipvs0 does not show (see ipvs.Journal)\n" +
		"address 203.0.113.7\naddress fd00::7\n" +
		"virtual-server --sctp-service 192.168.1.10:9\nvirtual-server -t 192.168.1.10:80\nvirtual-server -u [fd00::a]:53\n"
	if string(data) != want {
		t.Errorf("file:\n%s\nwant:\n%s", data, want)
	}
	addrs, keys, err = j.Load()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(wantKeys, ipvs.CompareKeys)
	if !slices.Equal(addrs, wantAddrs) || !slices.Equal(keys, wantKeys) {
		t.Errorf("loaded %v %v, want %v %v", addrs, keys, wantAddrs, wantKeys)
	}
	// An empty record removes the file; removing it twice is fine.
	for range 2 {
		if err := j.Save(nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(j.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty journal left a file: %v", err)
	}
	left, _ := os.ReadDir(filepath.Dir(j.Path))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestFileJournalSyntax(t *testing.T) {
	for _, line := range []string{"address 10.0.0", "virtual-server -x 10.0.0.1:80", "virtual-server -t 10.0.0.1", "route 10.0.0.1"} {
		j := &ipvs.FileJournal{Path: filepath.Join(t.TempDir(), ipvs.JournalFile)}
		if err := os.WriteFile(j.Path, []byte("# comment\n\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := j.Load(); !errors.Is(err, ipvs.ErrJournalSyntax) {
			t.Errorf("%q: err %v, want ErrJournalSyntax", line, err)
		}
	}
}

func TestParseKeyInvertsString(t *testing.T) {
	for _, k := range []ipvs.Key{
		{Protocol: model.TCP, Address: vip, Port: 80},
		{Protocol: model.UDP, Address: vip6, Port: 53},
		{Protocol: model.SCTP, Address: nodeIP, Port: 65535},
	} {
		got, err := ipvs.ParseKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKey(%q) = %v, %v", k.String(), got, err)
		}
	}
}

// cover is the Coverage of addresses bound on kube-ipvs0 and nodeIP.
func cover(bound ...netip.Addr) ipvs.Coverage {
	return ipvs.Coverage{NodeAddrs: []netip.Addr{nodeIP}, Bound: func(a netip.Addr) bool { return slices.Contains(bound, a) }}
}

// memJournal is a Journal in memory that can be made to fail.
type memJournal struct {
	addrs []netip.Addr
	keys  []ipvs.Key
	saves int
	err   error
}

func (m *memJournal) Load() ([]netip.Addr, []ipvs.Key, error) { return m.addrs, m.keys, nil }
func (m *memJournal) Save(a []netip.Addr, k []ipvs.Key) error {
	if m.err != nil {
		return m.err
	}
	m.saves++
	m.addrs, m.keys = slices.Clone(a), slices.Clone(k)
	slices.SortFunc(m.addrs, netip.Addr.Compare)
	slices.SortFunc(m.keys, ipvs.CompareKeys)
	return nil
}

// The chaos test's class 1: an externalIP that is the node's own address,
// served at L4 on a port outside the NodePort range. Its Service drops it
// while the proxy is down; the restarted proxy must delete it (and still
// leave a manual entry on the node address alone).
func TestJournalAdoptsL4NodeAddressAfterRestart(t *testing.T) {
	manual := vs("", model.TCP, nodeIP, 8443, ep3)
	for _, withJournal := range []bool{true, false} {
		ft := ipvstest.NewFakeTable(manual)
		j := &memJournal{}
		opts := ipvs.Options{}
		if withJournal {
			opts.Journal = j
		}
		r := ipvs.NewReconciler(ft, opts)
		l4 := vs("default/nginx:http", model.TCP, nodeIP, 80, ep1)
		clusterIP := vs("default/nginx:http", model.TCP, vip, 80, ep1)
		desired := []ipvs.VirtualServer{clusterIP, l4}
		// The applier's order: record, change, settle.
		if err := r.Record(desired, cover(), nil); err != nil {
			t.Fatal(err)
		}
		mustFull(t, r, desired, own(vip))
		if err := r.Settle(cover(vip)); err != nil {
			t.Fatal(err)
		}
		if withJournal && (len(j.keys) != 1 || j.keys[0] != l4.Key || len(j.addrs) != 0) {
			t.Fatalf("journal %v %v, want only %v (the ClusterIP is bound: the kernel shows it)", j.addrs, j.keys, l4.Key)
		}
		// kill -9; the Service drops the externalIP; restart.
		r2 := ipvs.NewReconciler(ft, opts)
		mustFull(t, r2, []ipvs.VirtualServer{clusterIP}, own(vip))
		leaked := ft.Has(l4.Key)
		if withJournal == leaked {
			t.Errorf("journal %v: node-address virtual server left = %v\n%s", withJournal, leaked, ft)
		}
		if !ft.Has(manual.Key) {
			t.Errorf("manual virtual server on the node address deleted")
		}
		if err := r2.Settle(cover(vip)); err != nil {
			t.Fatal(err)
		}
		if withJournal && (len(j.keys) != 0 || len(j.addrs) != 0) {
			t.Errorf("journal not pruned: %v %v", j.addrs, j.keys)
		}
	}
}

// Class 2: the address is unbound before its virtual servers are deleted;
// a kill between the two must not leave them foreign to the next process.
func TestJournalAdoptsVirtualServersOfUnboundAddress(t *testing.T) {
	ext := netip.MustParseAddr("203.0.113.106")
	ft := ipvstest.NewFakeTable()
	j := &memJournal{}
	r := ipvs.NewReconciler(ft, ipvs.Options{Journal: j})
	web := vs("default/web:http", model.TCP, ext, 80, ep1)
	mustFull(t, r, []ipvs.VirtualServer{web}, own(ext))
	if err := r.Settle(cover(ext)); err != nil {
		t.Fatal(err)
	}
	if len(j.keys)+len(j.addrs) != 0 || j.saves != 0 {
		t.Fatalf("bound address journaled: %v %v (%d saves)", j.addrs, j.keys, j.saves)
	}
	// Next sync: the externalIP is gone. Record, unbind ... kill.
	if err := r.Record(nil, cover(), []netip.Addr{ext}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.addrs, []netip.Addr{ext}) {
		t.Fatalf("leaving address not journaled: %v", j.addrs)
	}
	r2 := ipvs.NewReconciler(ft, ipvs.Options{Journal: j})
	res := mustFull(t, r2, nil, own()) // ext no longer bound
	if res.ServicesDeleted != 1 || ft.Len() != 0 {
		t.Errorf("virtual server of the unbound address not deleted:\n%s", ft)
	}
	if err := r2.Settle(cover()); err != nil {
		t.Fatal(err)
	}
	if len(j.keys)+len(j.addrs) != 0 {
		t.Errorf("journal not pruned: %v %v", j.addrs, j.keys)
	}
}

// A journal that cannot be written does not stop the sync; the next Record
// retries the write even when nothing new is recorded.
func TestJournalSaveFailureRetried(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	j := &memJournal{err: errors.New("read-only file system")}
	r := ipvs.NewReconciler(ft, ipvs.Options{Journal: j})
	l4 := vs("default/nginx:http", model.TCP, nodeIP, 80, ep1)
	if err := r.Record([]ipvs.VirtualServer{l4}, cover(), nil); err == nil {
		t.Fatal("Record hid the journal's error")
	}
	mustFull(t, r, []ipvs.VirtualServer{l4}, own())
	j.err = nil
	if err := r.Record([]ipvs.VirtualServer{l4}, cover(), nil); err != nil {
		t.Fatal(err)
	}
	if j.saves != 1 || len(j.keys) != 1 {
		t.Errorf("not retried: %d saves, %v", j.saves, j.keys)
	}
	// Nothing new: no write.
	if err := r.Record([]ipvs.VirtualServer{l4}, cover(), nil); err != nil || j.saves != 1 {
		t.Errorf("rewrote an unchanged journal: %d saves, %v", j.saves, err)
	}
}

// An address unbound in a partial sync of other services (it became
// protected): its virtual servers stay, now unrecognisable, so Settle turns
// the journaled address into their keys although this sync touched none.
func TestJournalKeepsUntouchedServersOfUnboundAddress(t *testing.T) {
	ext := netip.MustParseAddr("203.0.113.106")
	ft := ipvstest.NewFakeTable()
	j := &memJournal{}
	r := ipvs.NewReconciler(ft, ipvs.Options{Journal: j})
	web := vs("default/web:http", model.TCP, ext, 80, ep1)
	db := vs("default/db:sql", model.TCP, vip, 3306, ep2)
	mustFull(t, r, []ipvs.VirtualServer{web, db}, own(ext, vip))
	if err := r.Settle(cover(ext, vip)); err != nil {
		t.Fatal(err)
	}
	if err := r.Record([]ipvs.VirtualServer{db}, cover(vip), []netip.Addr{ext}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{web, db}, Changed: changed("default/db")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(cover(vip)); err != nil {
		t.Fatal(err)
	}
	if len(j.addrs) != 0 || !slices.Equal(j.keys, []ipvs.Key{web.Key}) {
		t.Errorf("journal %v %v, want only %v", j.addrs, j.keys, web.Key)
	}
}
