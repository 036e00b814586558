package ipvs_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

var (
	vip     = netip.MustParseAddr("10.96.0.10")
	vip6    = netip.MustParseAddr("fd00::a")
	nodeIP  = netip.MustParseAddr("192.168.1.10")
	foreign = netip.MustParseAddr("192.168.1.200")
	ep1     = netip.MustParseAddr("10.244.1.5")
	ep2     = netip.MustParseAddr("10.244.2.6")
	ep3     = netip.MustParseAddr("10.244.3.7")
)

func vs(svc string, proto model.Protocol, a netip.Addr, port uint16, eps ...netip.Addr) ipvs.VirtualServer {
	v := ipvs.VirtualServer{Key: ipvs.Key{Protocol: proto, Address: a, Port: port}, Scheduler: "rr", Service: portName(svc)}
	for _, e := range eps {
		v.RealServers = append(v.RealServers, ipvs.RealServer{Address: e, Port: 8080, Weight: 1})
	}
	return v
}

func newClock() *clocktesting.FakePassiveClock {
	return clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}
func lines(s ...string) string { return strings.Join(s, "\n") + "\n" }
func own(addrs ...netip.Addr) ipvs.Ownership {
	return ipvs.Ownership{BoundAddrs: addrs, NodeAddrs: []netip.Addr{nodeIP}}
}
func mustFull(t *testing.T, r *ipvs.Reconciler, d []ipvs.VirtualServer, o ipvs.Ownership) *ipvs.Result {
	t.Helper()
	res, err := r.Full(ipvs.Desired{VirtualServers: d, Own: o})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatalf("Full: %v", err)
	}
	return res
}

type fakeConntrack struct{ flows map[string]int }

func (c *fakeConntrack) DeleteFlows(p model.Protocol, vip netip.Addr, port uint16, ep netip.Addr) (int, error) {
	c.flows[string(p)+" "+netip.AddrPortFrom(vip, port).String()+" "+ep.String()]++
	return 2, nil
}

func TestFullFromEmpty(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	tcp := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	tcp.Flags, tcp.PersistenceTimeout = ipvs.FlagPersistent, 10800
	udp := vs("kube-system/dns:dns", model.UDP, vip6, 53, ep1)
	udp.RealServers[0].Address = netip.MustParseAddr("fd00:244::5")
	res := mustFull(t, r, []ipvs.VirtualServer{tcp, udp}, own(vip, vip6))
	want := lines(
		"-A -t 10.96.0.10:80 -s rr -p 10800",
		"-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
		"-a -t 10.96.0.10:80 -r 10.244.2.6:8080 -m -w 1",
		"-A -u [fd00::a]:53 -s rr",
		"-a -u [fd00::a]:53 -r [fd00:244::5]:8080 -m -w 1",
	)
	if got := ft.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
	if res.ServicesAdded != 2 || res.RealServersAdded != 3 || res.Changes() != 5 {
		t.Errorf("result %+v", res)
	}
	// Same state again, with a fresh reconciler (a restart): zero changes.
	before := ft.Mutations
	r2 := ipvs.NewReconciler(ft, ipvs.Options{})
	res = mustFull(t, r2, []ipvs.VirtualServer{tcp, udp}, own(vip, vip6))
	if res.Changes() != 0 || ft.Mutations != before {
		t.Errorf("restart made changes: %+v, mutations %d -> %d", res, before, ft.Mutations)
	}
}

func TestOwnership(t *testing.T) {
	keepalived := vs("", model.TCP, foreign, 443, ep3)
	manualNode := vs("", model.TCP, nodeIP, 22, ep3)       // node address, outside NodePort range
	staleNodePort := vs("", model.TCP, nodeIP, 30080, ep1) // ours: node address, NodePort range
	staleVIP := vs("", model.UDP, vip, 53, ep1)            // ours: bound on kube-ipvs0
	excluded := vs("", model.TCP, netip.MustParseAddr("10.200.0.1"), 80, ep1)
	ft := ipvstest.NewFakeTable(keepalived, manualNode, staleNodePort, staleVIP, excluded)
	ct := &fakeConntrack{flows: map[string]int{}}
	r := ipvs.NewReconciler(ft, ipvs.Options{ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")}, Conntrack: ct})
	web := vs("default/web:http", model.TCP, vip, 80, ep1)
	res := mustFull(t, r, []ipvs.VirtualServer{web}, ipvs.Ownership{BoundAddrs: []netip.Addr{vip, netip.MustParseAddr("10.200.0.1")}, NodeAddrs: []netip.Addr{nodeIP}})
	want := lines(
		"-A -t 10.96.0.10:80 -s rr",
		"-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
		"-A -t 10.200.0.1:80 -s rr",
		"-a -t 10.200.0.1:80 -r 10.244.1.5:8080 -m -w 1",
		"-A -t 192.168.1.10:22 -s rr",
		"-a -t 192.168.1.10:22 -r 10.244.3.7:8080 -m -w 1",
		"-A -t 192.168.1.200:443 -s rr",
		"-a -t 192.168.1.200:443 -r 10.244.3.7:8080 -m -w 1",
	)
	if got := ft.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
	if res.ServicesDeleted != 2 {
		t.Errorf("deleted %d, want 2", res.ServicesDeleted)
	}
	if ct.flows["udp 10.96.0.10:53 10.244.1.5"] != 1 {
		t.Errorf("conntrack of deleted UDP virtual server not flushed: %v", ct.flows)
	}
	// A desired virtual server inside the excluded CIDRs is refused, not made.
	res, err := r.Full(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{web, vs("default/x", model.TCP, netip.MustParseAddr("10.200.0.9"), 80, ep1)}, Own: own(vip)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Err(), ipvs.ErrExcluded) || len(res.FailedServices()) != 1 || res.FailedServices()[0] != portName("default/x") {
		t.Errorf("want ErrExcluded for default/x, got %v", res.Err())
	}
}

// An L4-only virtual server on the node's own address outside the NodePort
// range (a protected externalIP that is a local address) is not ours by the
// kernel-state rule, but one this process created stays managed across full
// syncs and goes when no longer desired; a manual one beside it stays.
func TestFullKeepsWhatItCreated(t *testing.T) {
	manual := vs("", model.TCP, nodeIP, 8443, ep3)
	ft := ipvstest.NewFakeTable(manual)
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	l4 := vs("default/nginx:http", model.TCP, nodeIP, 80, ep1)
	mustFull(t, r, []ipvs.VirtualServer{l4}, own())
	mustFull(t, r, []ipvs.VirtualServer{l4}, own())
	res := mustFull(t, r, nil, own())
	if res.ServicesDeleted != 1 {
		t.Errorf("deleted %d, want 1", res.ServicesDeleted)
	}
	want := lines(
		"-A -t 192.168.1.10:8443 -s rr",
		"-a -t 192.168.1.10:8443 -r 10.244.3.7:8080 -m -w 1",
	)
	if got := ft.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestUpdateServiceAttributes(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	web := vs("default/web:http", model.TCP, vip, 80, ep1)
	mustFull(t, r, []ipvs.VirtualServer{web}, own(vip))
	web.Scheduler = "sh"
	web.Flags = ipvs.FlagPersistent | ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2
	web.PersistenceTimeout = 60
	res, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{web}, Changed: changed("default/web")})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if res.ServicesUpdated != 1 || res.Changes() != 1 {
		t.Errorf("result %+v", res)
	}
	want := lines("-A -t 10.96.0.10:80 -s sh -p 60 -b sh-fallback,sh-port", "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1")
	if got := ft.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestGracefulTermination(t *testing.T) {
	clk := newClock()
	ft := ipvstest.NewFakeTable()
	ct := &fakeConntrack{flows: map[string]int{}}
	r := ipvs.NewReconciler(ft, ipvs.Options{Clock: clk, GracefulPeriod: 10 * time.Minute, Conntrack: ct})
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	dns := vs("default/dns:dns", model.UDP, vip, 53, ep1, ep2)
	mustFull(t, r, []ipvs.VirtualServer{web, dns}, own(vip))
	ft.SetConnections(web.Key, web.RealServers[1], 1, 0)

	// ep2 goes away from both services.
	web2 := vs("default/web:http", model.TCP, vip, 80, ep1)
	dns2 := vs("default/dns:dns", model.UDP, vip, 53, ep1)
	clk.SetTime(clk.Now().Add(time.Second))
	dumps := ft.Dumps
	res, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{web2, dns2}, Changed: changed("default/web", "default/dns")})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if ft.Dumps != dumps {
		t.Errorf("a partial sync that only quiesces read the table")
	}
	want := lines(
		"-A -u 10.96.0.10:53 -s rr",
		"-a -u 10.96.0.10:53 -r 10.244.1.5:8080 -m -w 1",
		"-A -t 10.96.0.10:80 -s rr",
		"-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
		"-a -t 10.96.0.10:80 -r 10.244.2.6:8080 -m -w 0",
	)
	if got := ft.String(); got != want {
		t.Fatalf("after removal:\n%s\nwant:\n%s", got, want)
	}
	if ct.flows["udp 10.96.0.10:53 10.244.2.6"] != 1 || len(ct.flows) != 1 {
		t.Errorf("conntrack flows deleted: %v", ct.flows)
	}
	// One IPv4 round that deleted the fake's 2 flows, no IPv6 round.
	if want := [2]ipvs.ConntrackRound{{Ran: true, Entries: 2}}; res.Conntrack != want {
		t.Errorf("conntrack rounds %+v, want %+v", res.Conntrack, want)
	}
	if r.Graceful() != 1 || res.Quiesced != 1 {
		t.Fatalf("graceful queue %d, quiesced %d", r.Graceful(), res.Quiesced)
	}

	// Still one connection: stays at weight 0.
	clk.SetTime(clk.Now().Add(time.Minute))
	if _, err := r.Partial(ipvs.Desired{VirtualServers: nil, Changed: changed()}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ft.String(), "10.244.2.6:8080 -m -w 0") {
		t.Fatalf("deleted while connections remain:\n%s", ft.String())
	}
	// Connections gone: deleted on the next sync.
	ft.SetConnections(web.Key, web.RealServers[1], 0, 0)
	clk.SetTime(clk.Now().Add(time.Second))
	res, _ = r.Partial(ipvs.Desired{VirtualServers: nil, Changed: changed()})
	if strings.Contains(ft.String(), "10.244.2.6:8080") || res.RealServersDeleted != 1 || r.Graceful() != 0 {
		t.Fatalf("not deleted after connections ended (%+v):\n%s", res, ft.String())
	}
}

func TestGracefulPeriodAndComeback(t *testing.T) {
	clk := newClock()
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{Clock: clk, GracefulPeriod: 10 * time.Minute})
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2, ep3)
	mustFull(t, r, []ipvs.VirtualServer{web}, own(vip))
	ft.SetConnections(web.Key, web.RealServers[1], 3, 4)
	ft.SetConnections(web.Key, web.RealServers[2], 3, 4)
	clk.SetTime(clk.Now().Add(time.Second))
	mustPartial := func(d ...ipvs.VirtualServer) *ipvs.Result {
		t.Helper()
		res, err := r.Partial(ipvs.Desired{VirtualServers: d, Changed: changed("default/web:http")})
		if err != nil || res.Err() != nil {
			t.Fatal(err, res.Err())
		}
		return res
	}
	mustPartial(vs("default/web:http", model.TCP, vip, 80, ep1))
	// ep3 comes back: restored to weight 1 and out of the queue.
	clk.SetTime(clk.Now().Add(time.Minute))
	res := mustPartial(vs("default/web:http", model.TCP, vip, 80, ep1, ep3))
	if res.RealServersUpdated != 1 || r.Graceful() != 1 {
		t.Fatalf("comeback: %+v, queue %d", res, r.Graceful())
	}
	// The period runs out: ep2 deleted despite its connections.
	clk.SetTime(clk.Now().Add(10 * time.Minute))
	res = mustPartial(vs("default/web:http", model.TCP, vip, 80, ep1, ep3))
	want := lines("-A -t 10.96.0.10:80 -s rr", "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1", "-a -t 10.96.0.10:80 -r 10.244.3.7:8080 -m -w 1")
	if got := ft.String(); got != want || res.RealServersDeleted != 1 {
		t.Fatalf("after period (%+v):\n%s\nwant:\n%s", res, got, want)
	}
}

func TestRestartRepairsWeightZero(t *testing.T) {
	clk := newClock()
	// A crashed proxy left ep1 quiesced (still desired) and ep2 quiesced
	// (not desired, no connections).
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	web.RealServers[0].Weight, web.RealServers[1].Weight = 0, 0
	ft := ipvstest.NewFakeTable(web)
	r := ipvs.NewReconciler(ft, ipvs.Options{Clock: clk})
	res := mustFull(t, r, []ipvs.VirtualServer{vs("default/web:http", model.TCP, vip, 80, ep1)}, own(vip))
	if res.RealServersUpdated != 1 || r.Graceful() != 1 {
		t.Fatalf("restart: %+v queue %d", res, r.Graceful())
	}
	clk.SetTime(clk.Now().Add(time.Second))
	res = mustFull(t, r, []ipvs.VirtualServer{vs("default/web:http", model.TCP, vip, 80, ep1)}, own(vip))
	want := lines("-A -t 10.96.0.10:80 -s rr", "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1")
	if got := ft.String(); got != want || res.RealServersDeleted != 1 {
		t.Fatalf("(%+v):\n%s\nwant:\n%s", res, got, want)
	}
}

func TestPartialTouchesOnlyChanged(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	if _, err := r.Partial(ipvs.Desired{VirtualServers: nil, Changed: changed()}); !errors.Is(err, ipvs.ErrNotSynced) {
		t.Fatalf("Partial before Full: %v", err)
	}
	a := vs("ns/a:p", model.TCP, vip, 80, ep1)
	b := vs("ns/b:p", model.TCP, vip, 81, ep1)
	mustFull(t, r, []ipvs.VirtualServer{a, b}, own(vip))
	// Desired says b is gone and a has a new endpoint, but only a changed:
	// b must stay, a must change.
	a2 := vs("ns/a:p", model.TCP, vip, 80, ep1, ep2)
	res, err := r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{a2}, Changed: changed("ns/a")})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if res.Changes() != 1 || !r.Has(b.Key) {
		t.Fatalf("partial: %+v", res)
	}
	// Now b changed (deleted).
	res, _ = r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{a2}, Changed: changed("ns/b")})
	if res.ServicesDeleted != 1 || r.Has(b.Key) || strings.Contains(ft.String(), ":81") {
		t.Fatalf("b not deleted: %+v\n%s", res, ft.String())
	}
}

func TestFailuresDoNotStopOthers(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	boom := errors.New("boom")
	ft.Fail = func(op string, k ipvs.Key) error {
		if op == "AddService" && k.Port == 81 {
			return boom
		}
		return nil
	}
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	res, err := r.Full(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{
		vs("ns/a:p", model.TCP, vip, 80, ep1),
		vs("ns/b:p", model.TCP, vip, 81, ep1),
		vs("ns/c:p", model.TCP, vip, 82, ep1),
	}, Own: own(vip)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Err(), boom) || !slices.Equal(res.FailedServices(), []model.ServicePortName{portName("ns/b:p")}) {
		t.Fatalf("failures: %v %v", res.Err(), res.FailedServices())
	}
	if r.Has(ipvs.Key{Protocol: model.TCP, Address: vip, Port: 81}) || res.ServicesAdded != 2 {
		t.Fatalf("result %+v", res)
	}
	// Next full sync retries and succeeds.
	ft.Fail = nil
	res = mustFull(t, r, []ipvs.VirtualServer{
		vs("ns/a:p", model.TCP, vip, 80, ep1),
		vs("ns/b:p", model.TCP, vip, 81, ep1),
		vs("ns/c:p", model.TCP, vip, 82, ep1),
	}, own(vip))
	if res.ServicesAdded != 1 || res.RealServersAdded != 1 {
		t.Fatalf("retry: %+v", res)
	}
}

func TestDriftRepairedByFull(t *testing.T) {
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{})
	web := vs("default/web:http", model.TCP, vip, 80, ep1, ep2)
	dns := vs("default/dns:dns", model.UDP, vip, 53, ep1)
	if res := mustFull(t, r, []ipvs.VirtualServer{web, dns}, own(vip)); res.Drift.Total() != 0 {
		t.Errorf("first Full reported drift %d", res.Drift.Total())
	}
	if res := mustFull(t, r, []ipvs.VirtualServer{web, dns}, own(vip)); res.Drift.Total() != 0 || res.Changes() != 0 {
		t.Errorf("unchanged Full: drift %d, changes %d", res.Drift.Total(), res.Changes())
	}
	// Someone deletes the dns server, adds one on our VIP, and deletes a
	// real server of web and changes a weight by hand: three drifts.
	if err := ft.DelService(dns.Key); err != nil {
		t.Fatal(err)
	}
	if err := ft.AddService(vs("", model.TCP, vip, 22)); err != nil {
		t.Fatal(err)
	}
	if err := ft.DelRealServer(web.Key, web.RealServers[0]); err != nil {
		t.Fatal(err)
	}
	if err := ft.UpdateRealServer(web.Key, ipvs.RealServer{Address: ep2, Port: 8080, Weight: 5}); err != nil {
		t.Fatal(err)
	}
	res := mustFull(t, r, []ipvs.VirtualServer{web, dns}, own(vip))
	if res.RealServersAdded != 2 || res.RealServersUpdated != 1 || res.ServicesAdded != 1 || res.ServicesDeleted != 1 || res.Drift.Total() != 3 {
		t.Fatalf("repair: %+v", res)
	}
	if res := mustFull(t, r, []ipvs.VirtualServer{web, dns}, own(vip)); res.Drift.Total() != 0 {
		t.Errorf("drift %d after the repair", res.Drift.Total())
	}
	// The service itself deleted by hand, then a partial sync that updates
	// it: recreated.
	if err := ft.DelService(web.Key); err != nil {
		t.Fatal(err)
	}
	web.Scheduler = "lc"
	res, _ = r.Partial(ipvs.Desired{VirtualServers: []ipvs.VirtualServer{web}, Changed: changed("default/web")})
	if res.Err() != nil || res.ServicesAdded != 1 || res.RealServersAdded != 2 {
		t.Fatalf("recreate: %+v %v", res, res.Err())
	}
}

func TestKernelSysctls(t *testing.T) {
	names := func(ss []ipvs.Sysctl) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Name+"="+string(rune('0'+s.Value)))
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		release string
		strict  bool
		want    string
	}{
		{"6.1.0-56-amd64", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
		{"5.4.0-150-generic", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/conn_reuse_mode=0 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
		{"5.9.0", true, "net/ipv4/vs/conntrack=1 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1 net/ipv4/conf/all/arp_ignore=1 net/ipv4/conf/all/arp_announce=2"},
		{"3.10.0-1160.el7", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
		{"4.19.0", false, "net/ipv4/vs/conntrack=1 net/ipv4/vs/conn_reuse_mode=0 net/ipv4/vs/expire_nodest_conn=1 net/ipv4/vs/expire_quiescent_template=1 net/ipv4/ip_forward=1"},
	} {
		if got := names(ipvs.KernelSysctls(tc.release, tc.strict)); got != tc.want {
			t.Errorf("%s strict=%v:\n got %s\nwant %s", tc.release, tc.strict, got, tc.want)
		}
	}
}

// TestGracefulCountersOneRead: with quiesced real servers in many virtual
// servers, one sync reads all counters at once, not once per virtual server.
func TestGracefulCountersOneRead(t *testing.T) {
	clk := newClock()
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{Clock: clk, GracefulPeriod: 10 * time.Minute})
	var before, after []ipvs.VirtualServer
	var addrs []netip.Addr
	for i := range 20 {
		a := netip.AddrFrom4([4]byte{10, 96, 1, byte(i + 1)})
		addrs = append(addrs, a)
		before = append(before, vs("default/s:http", model.TCP, a, 80, ep1, ep2))
		after = append(after, vs("default/s:http", model.TCP, a, 80, ep1))
	}
	mustFull(t, r, before, own(addrs...))
	for _, v := range before[:10] {
		ft.SetConnections(v.Key, v.RealServers[1], 1, 0) // half keep a connection
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if _, err := r.Partial(ipvs.Desired{VirtualServers: after, Changed: changed("default/s")}); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	dumps := ft.Dumps
	res, err := r.Partial(ipvs.Desired{VirtualServers: after, Changed: changed()})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if ft.Dumps != dumps+1 {
		t.Errorf("graceful queue of 20 virtual servers read the table %d times, want once", ft.Dumps-dumps)
	}
	if res.RealServersDeleted != 10 || r.Graceful() != 10 {
		t.Errorf("deleted %d (want the 10 without connections), %d still waiting", res.RealServersDeleted, r.Graceful())
	}
}

// TestGracefulCountersFewOfMany: when the waiting virtual servers are few
// among many (one Service's ClusterIP and NodePort among 100 owned), the
// queue reads only theirs, one dump each, not the whole table: an endpoint
// removed from one Service costs that Service's share.
func TestGracefulCountersFewOfMany(t *testing.T) {
	clk := newClock()
	ft := ipvstest.NewFakeTable()
	r := ipvs.NewReconciler(ft, ipvs.Options{Clock: clk, GracefulPeriod: 10 * time.Minute})
	var before, after []ipvs.VirtualServer
	var addrs []netip.Addr
	for i := range 100 {
		a := netip.AddrFrom4([4]byte{10, 96, 1, byte(i + 1)})
		addrs = append(addrs, a)
		before = append(before, vs("default/s:http", model.TCP, a, 80, ep1, ep2))
		after = append(after, vs("default/s:http", model.TCP, a, 80, ep1, ep2))
	}
	mustFull(t, r, before, own(addrs...))
	for i := range 2 {
		after[i] = vs("default/s:http", model.TCP, addrs[i], 80, ep1)
		ft.SetConnections(before[i].Key, before[i].RealServers[1], 1, 0)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if _, err := r.Partial(ipvs.Desired{VirtualServers: after, Changed: changed("default/s")}); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	dumps := ft.Dumps
	res, err := r.Partial(ipvs.Desired{VirtualServers: after, Changed: changed()})
	if err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	if ft.Dumps != dumps+2 {
		t.Errorf("graceful queue of 2 virtual servers among 100 read %d times, want one dump of each", ft.Dumps-dumps)
	}
	if r.Graceful() != 2 {
		t.Errorf("%d still waiting, want 2", r.Graceful())
	}
}
