package ipvs_test

import (
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// statsTable is a fake table whose walk gives counters: those of
// counters by key, and each real server's connections as the fake holds
// them.
type statsTable struct {
	*ipvstest.FakeTable
	counters map[ipvs.Key]ipvs.Counters
	walks    int
}

func (s *statsTable) EachServiceStats(fn func(vs *ipvs.VirtualServer, c *ipvs.Counters, conns []ipvs.Conns)) error {
	s.walks++
	all, _ := s.AllRealServers()
	return s.EachService(func(vs *ipvs.VirtualServer) {
		c := s.counters[vs.Key]
		conns := make([]ipvs.Conns, len(vs.RealServers))
		for i, rs := range vs.RealServers {
			for _, st := range all[vs.Key] {
				if st.RealServer.Address == rs.Address && st.RealServer.Port == rs.Port {
					conns[i] = ipvs.Conns{Active: uint64(st.ActiveConns), Inactive: uint64(st.InactiveConns)}
				}
			}
		}
		fn(vs, &c, conns)
	})
}

// The counters of a full sync's read are handed on labelled with the
// desired virtual server's service port and kind, from the same walk
// (no second read); a virtual server no Service desires (a foreign one)
// is not.
func TestFullPublishesLabelledStats(t *testing.T) {
	web := model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}, Port: "http"}
	key := func(a string, port uint16) ipvs.Key {
		return ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr(a), Port: port}
	}
	rs := ipvs.RealServer{Address: netip.MustParseAddr("10.244.0.5"), Port: 8080, Weight: 1}
	cluster, nodePort, foreign := key("10.96.0.10", 80), key("198.51.100.1", 30080), key("192.0.2.1", 80)
	desired := []ipvs.VirtualServer{
		{Key: cluster, Scheduler: "rr", Service: web, Kind: model.KindClusterIP, RealServers: []ipvs.RealServer{rs}},
		{Key: nodePort, Scheduler: "rr", Service: web, Kind: model.KindNodePort, RealServers: []ipvs.RealServer{rs}},
	}
	ipvs.Sort(desired)
	fake := ipvstest.NewFakeTable(ipvs.VirtualServer{Key: foreign, Scheduler: "rr"})
	tbl := &statsTable{FakeTable: fake, counters: map[ipvs.Key]ipvs.Counters{
		cluster: {Connections: 3, InPackets: 30, OutPackets: 20, InBytes: 3000, OutBytes: 2000},
		foreign: {Connections: 99},
	}}
	var got []*ipvs.StatsSnapshot
	r := ipvs.NewReconciler(tbl, ipvs.Options{Stats: ipvs.StatsOptions{Publish: func(s *ipvs.StatsSnapshot) { got = append(got, s) }, RealServers: true}})
	own := ipvs.Ownership{NodeAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.1")}}
	if _, err := r.Full(ipvs.Desired{VirtualServers: desired, Own: own}); err != nil {
		t.Fatal(err)
	}
	// The first read found only the foreign server: nothing desired to label.
	if len(got) != 1 || len(got[0].Services) != 0 {
		t.Fatalf("first snapshot %+v, want one with no service", got)
	}
	fake.SetConnections(cluster, rs, 2, 5)
	read := r.BeginFull()
	dump, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.FullFrom(ipvs.Desired{VirtualServers: desired, Own: own}, dump, nil); err != nil {
		t.Fatal(err)
	}
	// Each walk of this fake reads it twice (its listing and its
	// connections); anything more would be a second read.
	if tbl.walks != 2 || fake.Dumps != 2*tbl.walks {
		t.Errorf("%d stats walks, %d dumps: want one walk per read and no other read", tbl.walks, fake.Dumps)
	}
	if len(got) != 2 {
		t.Fatalf("%d snapshots, want 2", len(got))
	}
	s := got[1].Services
	if len(s) != 2 {
		t.Fatalf("snapshot %+v, want the two desired virtual servers", s)
	}
	// Key order: 10.96.0.10 before 198.51.100.1.
	if s[0].Service != web || s[0].Kind != model.KindClusterIP || s[0].Connections != 3 || s[0].OutBytes != 2000 ||
		s[0].Conns != (ipvs.Conns{Active: 2, Inactive: 5}) {
		t.Errorf("cluster IP's stats %+v", s[0])
	}
	if len(s[0].RealServers) != 1 || s[0].RealServers[0].Address != rs.Address || s[0].RealServers[0].Conns.Inactive != 5 {
		t.Errorf("cluster IP's real servers %+v", s[0].RealServers)
	}
	if s[1].Kind != model.KindNodePort || s[1].Connections != 0 {
		t.Errorf("node port's stats %+v", s[1])
	}
	if got[1].Read.IsZero() {
		t.Error("snapshot without its read's time")
	}
}

// Without Publish the read keeps no counters and asks the table for none.
func TestNoStatsWithoutPublish(t *testing.T) {
	tbl := &statsTable{FakeTable: ipvstest.NewFakeTable()}
	r := ipvs.NewReconciler(tbl, ipvs.Options{})
	if _, err := r.Full(ipvs.Desired{VirtualServers: nil, Own: ipvs.Ownership{}}); err != nil {
		t.Fatal(err)
	}
	if tbl.walks != 0 {
		t.Errorf("%d stats walks, want 0", tbl.walks)
	}
}
