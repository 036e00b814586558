package ipvs_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// failOne is a FakeTable whose batched adds fail for one real server
// address and go on with the rest, as the kernel's batch does.
type failOne struct {
	*ipvstest.FakeTable
	fail    ipvs.RealServer
	err     error
	batches int
}

func (f *failOne) AddRealServers(k ipvs.Key, rss []ipvs.RealServer, each func(int, error)) {
	f.batches++
	for i, rs := range rss {
		if rs.Address == f.fail.Address {
			each(i, f.err)
			continue
		}
		each(i, f.AddRealServer(k, rs))
	}
}

// TestAddRealServersOneFailureInBatch: a real server the kernel refuses in
// the middle of a virtual server's batch fails its service; the others
// are in the kernel and the mirror, and the next full sync adds the one
// that failed and nothing else.
func TestAddRealServersOneFailureInBatch(t *testing.T) {
	boom := errors.New("boom")
	ft := &failOne{FakeTable: ipvstest.NewFakeTable(), fail: ipvs.RealServer{Address: ep2}, err: boom}
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	d := []ipvs.VirtualServer{vs("ns/a:p", model.TCP, vip, 80, ep1, ep2, ep3)}
	res, err := r.Full(ipvs.Desired{VirtualServers: d, Own: own(vip)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Err(), boom) || res.RealServersAdded != 2 || ft.batches != 1 {
		t.Fatalf("result %+v, err %v, batches %d", res, res.Err(), ft.batches)
	}
	want := lines(
		"-A -t 10.96.0.10:80 -s rr",
		"-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
		"-a -t 10.96.0.10:80 -r 10.244.3.7:8080 -m -w 1",
	)
	if got := ft.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
	owned := r.Owned()
	if len(owned) != 1 || len(owned[0].RealServers) != 2 {
		t.Fatalf("mirror %+v", owned)
	}

	ft.fail = ipvs.RealServer{}
	res, err = r.Full(ipvs.Desired{VirtualServers: d, Own: own(vip)})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if res.RealServersAdded != 1 || res.Changes() != 1 {
		t.Fatalf("retry: %+v", res)
	}
	// The mirror holds d's list now, and a further full sync changes nothing.
	if got := r.Owned()[0].RealServers; !ipvs.SameRealServers(got, d[0].RealServers) {
		t.Fatalf("mirror %v, want %v", got, d[0].RealServers)
	}
	if res := mustFull(t, r, d, own(vip)); res.Changes() != 0 {
		t.Fatalf("third full sync: %+v", res)
	}
}

// TestDuplicateRealServerProgrammedOnce: a desired virtual server that
// lists a real server twice gets it once, in one batch, and a second full
// sync changes nothing.
func TestDuplicateRealServerProgrammedOnce(t *testing.T) {
	ft := &failOne{FakeTable: ipvstest.NewFakeTable()}
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	d := []ipvs.VirtualServer{vs("ns/a:p", model.TCP, vip, 80, ep1, ep2, ep1, ep3)}
	res := mustFull(t, r, d, own(vip))
	if res.RealServersAdded != 3 || ft.batches != 1 {
		t.Fatalf("result %+v, batches %d", res, ft.batches)
	}
	got := r.Owned()[0].RealServers
	if want := d[0].RealServers[:2]; len(got) != 3 || !slices.Equal(got[:2], want) || got[2] != d[0].RealServers[3] {
		t.Fatalf("mirror %v", got)
	}
	if res := mustFull(t, r, d, own(vip)); res.Changes() != 0 {
		t.Fatalf("second full sync: %+v", res)
	}
}

// countingTable counts the Table's batched and single service adds, and
// can hide virtual servers from its dump (made by someone else after it).
type countingTable struct {
	*ipvstest.FakeTable
	batches, singles int
	hide             map[ipvs.Key]bool
}

func (c *countingTable) AddServices(vss []ipvs.VirtualServer, each func(int, error)) {
	c.batches++
	c.FakeTable.AddServices(vss, each)
}

func (c *countingTable) AddService(vs ipvs.VirtualServer) error {
	c.singles++
	return c.FakeTable.AddService(vs)
}

func (c *countingTable) Services() ([]ipvs.VirtualServer, error) {
	all, err := c.FakeTable.Services()
	return slices.DeleteFunc(all, func(vs ipvs.VirtualServer) bool { return c.hide[vs.Key] }), err
}

// TestFullCreatesInBatches: a first full sync creates its virtual servers
// createBatch to an AddServices, none alone; one that someone else made
// after the dump is taken over (`ipvsadm -E`) with its real servers.
func TestFullCreatesInBatches(t *testing.T) {
	ct := &countingTable{FakeTable: ipvstest.NewFakeTable()}
	var d []ipvs.VirtualServer
	for i := range ipvs.CreateBatch + 3 {
		d = append(d, vs("ns/a:p", model.TCP, vip, uint16(1000+i), ep1, ep2))
	}
	taken := d[ipvs.CreateBatch+1]
	other := taken
	other.Scheduler, other.RealServers = "wrr", nil
	if err := ct.FakeTable.AddService(other); err != nil {
		t.Fatal(err)
	}
	ct.hide = map[ipvs.Key]bool{taken.Key: true}
	r := ipvs.NewReconciler(ct, ipvs.Options{})
	res := mustFull(t, r, d, own(vip))
	if ct.batches != 2 || ct.singles != 0 {
		t.Fatalf("%d batches, %d single adds; want 2 and 0", ct.batches, ct.singles)
	}
	if res.ServicesAdded != ipvs.CreateBatch+2 || res.ServicesUpdated != 1 || res.RealServersAdded != 2*len(d) {
		t.Fatalf("result %+v", res)
	}
	got, err := ct.FakeTable.RealServers(taken.Key)
	if err != nil || len(got) != 2 {
		t.Fatalf("taken-over virtual server: %v %v", got, err)
	}
	ct.hide = nil
	if res := mustFull(t, r, d, own(vip)); res.Changes() != 0 {
		t.Fatalf("second full sync: %+v", res)
	}
}
