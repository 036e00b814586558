//go:build kernel

package applier

// Kernel tests: the real appliers (ipvskernel.Table, addrkernel.Link,
// iptables.Syncer) inside a fresh ktest node namespace per test, driven by
// a planner.State that planner.Plan computed from a model.Cluster. Each test
// compares the kernel with the plan's text forms (`ipvsadm -S -n`,
// `ip -o addr show dev kube-ipvs0`, `ipset save`, `iptables-save`) and sends
// real TCP, UDP and SCTP traffic from pods and from clients outside the node.
// A netlink address monitor runs for the whole of every test and fails it if
// a protected address ever appears on kube-ipvs0.
//
//	go test -c -tags kernel -o /tmp/applier.test ./internal/drive/applier/
//	go run ./test/vmtest/cmd/vmrun -- /tmp/applier.test -test.v

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestKernelServices: every kind of service, both families, real traffic.
func TestKernelServices(t *testing.T) {
	b := newKBed(t)
	b.nodeListener(22)
	p := b.open(ipvs.Options{})
	st := b.plan(testCluster())
	if len(st.Refusals) != 0 {
		t.Fatalf("plan refused: %v", st.Refusals)
	}
	res := b.full(p, st)
	t.Logf("full sync: %d IPVS changes, bind %+v, unbind %+v", res.IPVS.Changes(), res.Bind, res.Unbind)
	b.checkPlan(st)
	if out := b.node.Run(t, "ip", "-o", "link", "show", addrmgr.Device); !strings.Contains(out, "state DOWN") {
		t.Errorf("kube-ipvs0 is not down: %s", out)
	}
	node := b.nodeLocal()

	for _, f := range fams {
		t.Run(f.name, func(t *testing.T) {
			for _, proto := range []ktest.Proto{ktest.TCP, ktest.UDP, ktest.SCTP} {
				names, peers := spread(t, b.podC.NS, proto, ap(f.web, 80), 6)
				if names["pod-a"] == 0 || names["pod-b"] == 0 {
					t.Errorf("ClusterIP %s from pod-c: not balanced over both backends: %v", proto, names)
				}
				// Traffic from inside --cluster-cidr is not masqueraded.
				if peers[f.podC.String()] != 6 {
					t.Errorf("ClusterIP %s from pod-c: backends saw %v, want pod-c's own %s", proto, peers, f.podC)
				}
			}
			// From outside the cluster CIDR, ClusterIP traffic is masqueraded.
			_, peers := spread(t, b.cliA.NS, ktest.TCP, ap(f.web, 80), 2)
			for src := range peers {
				if !node[src] {
					t.Errorf("ClusterIP from client A: backend saw %s, want a node address (masquerade)", src)
				}
			}
			for _, tc := range []struct {
				what string
				to   string
			}{
				{"NodePort", ap(f.node, 30080)},
				{"externalIP", ap(f.externalIP, 80)},
				{"LoadBalancer IP from an allowed source", ap(f.lbIP, 80)},
			} {
				names, peers := spread(t, b.cliA.NS, ktest.TCP, tc.to, 6)
				if names["pod-a"] == 0 || names["pod-b"] == 0 {
					t.Errorf("%s from client A: not balanced: %v", tc.what, names)
				}
				for src := range peers {
					if !node[src] {
						t.Errorf("%s (externalTrafficPolicy Cluster): backend saw %s, want a node address", tc.what, src)
					}
				}
				t.Logf("%s: %v, sources seen %v", tc.what, names, peers)
			}
			// loadBalancerSourceRanges: client B is dropped.
			if out, err := b.cliB.Request(ktest.TCP, ap(f.lbIP, 80)); err == nil {
				t.Errorf("LoadBalancer IP from a source outside loadBalancerSourceRanges answered %q", out)
			}
			// externalTrafficPolicy Local: only the local endpoint, client's own address.
			names, peers := spread(t, b.cliA.NS, ktest.TCP, ap(f.node, 30040), 6)
			if names["pod-a"] != 6 || peers[f.cliA.String()] != 6 {
				t.Errorf("Local NodePort: answers %v, sources %v; want only pod-a, seeing client A %s", names, peers, f.cliA)
			}
			// Session affinity: 20 new connections, one backend; without: both.
			if names, _ := spread(t, b.cliA.NS, ktest.TCP, ap(f.sticky, 80), 20); len(names) != 1 {
				t.Errorf("session affinity: %v, want one backend for all 20", names)
			}
			if names, _ := spread(t, b.cliA.NS, ktest.TCP, ap(f.web, 80), 20); len(names) != 2 {
				t.Errorf("without affinity: %v, want both backends", names)
			}
			// Hairpin: pod-a reaches itself through its own service.
			name, peer := ask(t, b.podA.NS, ktest.TCP, ap(f.hair, 80))
			if name != "pod-a" || peer == f.podA {
				t.Errorf("hairpin: %s saw %s, want pod-a seeing a masqueraded source", name, peer)
			}
			// The VIP filter: sshd on the node is reachable on the node's
			// address, never through a VIP.
			if name, _ := ask(t, b.cliA.NS, ktest.TCP, ap(f.node, 22)); name != "node" {
				t.Errorf("node listener on %s: %q", ap(f.node, 22), name)
			}
			for _, from := range []*ktest.NS{b.cliA.NS, b.podC.NS} {
				for _, vip := range []netip.Addr{f.web, f.externalIP, f.lbIP} {
					if out, err := from.Request(ktest.TCP, ap(vip, 22)); err == nil {
						t.Errorf("node port 22 reachable through VIP %s from %s: %q", vip, from.Name, out)
					}
				}
			}
		})
	}
}

// TestKernelGracefulTermination: a removed TCP endpoint is quiesced at
// weight 0 while its connection lives and deleted after the graceful
// period; a removed UDP endpoint goes at once, its conntrack flows with it.
func TestKernelGracefulTermination(t *testing.T) {
	b := newKBed(t)
	// The graceful period runs on a clock the test advances: under TCG the
	// steps below take longer than any period short enough to wait for.
	clk := &testClock{}
	p := b.open(ipvs.Options{GracefulPeriod: time.Minute, Clock: clk})
	c := testCluster()
	b.full(p, b.plan(c))
	f := v4
	vip := ap(f.drain, 80)

	// An established TCP connection on pod-b, and a UDP flow.
	var tcp *lineConn
	for range 6 {
		lc := dialLine(t, b.cliA.NS, "tcp", vip)
		if name, err := lc.ask(); err == nil && name == "pod-b" {
			tcp = lc
			break
		}
		lc.c.Close()
	}
	if tcp == nil {
		t.Fatal("no TCP connection reached pod-b")
	}
	udp := dialLine(t, b.cliA.NS, "udp", ap(f.drain, 53))
	first, err := udp.ask()
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]netip.Addr{"pod-a": f.podB, "pod-b": f.podA}[first]
	otherName := map[string]string{"pod-a": "pod-b", "pod-b": "pod-a"}[first]

	// pod-b leaves drain:tcp, the UDP flow's backend leaves drain:udp.
	setEndpoints(&c, "drain", "tcp", eps(thisNode, linePort, f.podA, v6.podA, v6.podB))
	setEndpoints(&c, "drain", "udp", eps(thisNode, ktest.BackendPort, other, v6.podA, v6.podB))
	st := b.plan(c)
	res := b.partial(p, st, "default/drain")
	if res.IPVS.Quiesced != 1 || res.IPVS.ConntrackDeleted != 1 || res.IPVS.RealServersDeleted != 1 {
		t.Errorf("partial: %+v, want 1 quiesced, 1 UDP real server deleted with its conntrack flows", res.IPVS)
	}
	// One IPv4 round of flow deletions (kubeproxy_conntrack_reconciler_*).
	// It finds the one UDP flow, or none: with expire_nodest_conn=1 the
	// kernel expires the removed real server's connections, and their
	// conntrack entries, one jiffy after the deletion, and it won that race
	// in the VM (Entries 0). The exact count is TestKernelDeleteFlows'
	// (ipvs/kernel).
	if ct := res.IPVS.Conntrack; !ct[0].Ran || ct[0].Entries > 1 || ct[1].Ran {
		t.Errorf("conntrack rounds %+v, want one IPv4 round that deleted at most the 1 UDP flow", ct)
	}
	quiesced := "-a -t " + vip + " -r " + ap(f.podB, linePort) + " -m -w 0"
	if got := b.ipvsadmSave(); !slices.Contains(got, quiesced) {
		t.Fatalf("pod-b not quiesced at weight 0:\n%s", strings.Join(got, "\n"))
	}
	// Apart from the quiesced line, the kernel is the plan.
	b.checkPlan(st, quiesced)
	if out, _ := b.node.Exec("conntrack", "-L", "-p", "udp", "--orig-dst", f.drain.String()); strings.Contains(out, "dport=53") {
		t.Errorf("conntrack flows of the removed UDP endpoint left:\n%s", out)
	}
	// The established connection keeps working on pod-b ...
	for range 3 {
		if name, err := tcp.ask(); err != nil || name != "pod-b" {
			t.Fatalf("established connection after removal: %q %v", name, err)
		}
	}
	// ... while new connections go to pod-a only.
	for range 4 {
		lc := dialLine(t, b.cliA.NS, "tcp", vip)
		if name, err := lc.ask(); err != nil || name != "pod-a" {
			t.Fatalf("new connection after removal answered by %q (%v), want pod-a", name, err)
		}
		lc.c.Close()
	}
	// UDP switches at once, on the same client socket.
	if got, err := udp.ask(); err != nil || got != otherName {
		t.Fatalf("UDP after removal answered by %q (%v), want %s", got, err, otherName)
	}
	// Within the period, with the connection open: still there.
	b.partial(p, st)
	if !slices.Contains(b.ipvsadmSave(), quiesced) {
		t.Fatal("quiesced real server deleted while its connection is open, within the period")
	}
	// After the period: deleted on the next sync, and the kernel is the plan.
	clk.advance(61 * time.Second)
	res = b.partial(p, st)
	if res.IPVS.RealServersDeleted != 1 {
		t.Errorf("after the graceful period: %+v", res.IPVS)
	}
	b.checkPlan(st)

	// An endpoint that comes back is restored at weight 1.
	setEndpoints(&c, "drain", "tcp", eps(thisNode, linePort, f.podA, f.podB, v6.podA, v6.podB))
	st = b.plan(c)
	b.partial(p, st, "default/drain")
	b.checkPlan(st)
}

// testClock is real time plus an offset the test advances: a
// clock.PassiveClock.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// TestKernelOwnershipAndCleanup: foreign state survives every sync and the
// cleanup; the cleanup removes everything the proxy made.
func TestKernelOwnershipAndCleanup(t *testing.T) {
	b := newKBed(t)
	// keepalived: a virtual server on an address added by hand to eth0;
	// a virtual server inside --ipvs-exclude-cidrs; another chain and set.
	b.node.Run(t, "ip", "addr", "add", "198.51.100.100/24", "dev", "eth0")
	b.node.Run(t, "ipvsadm", "-A", "-t", "198.51.100.100:443", "-s", "wlc")
	b.node.Run(t, "ipvsadm", "-a", "-t", "198.51.100.100:443", "-r", "10.244.1.10:8080", "-m", "-w", "3")
	b.node.Run(t, "ipvsadm", "-A", "-t", "10.200.0.1:80", "-s", "rr")
	b.node.Run(t, "ipvsadm", "-a", "-t", "10.200.0.1:80", "-r", "10.244.2.10:8080", "-m", "-w", "0")
	b.node.Run(t, "ipvsadm", "-A", "-t", "198.51.100.1:22", "-s", "rr") // node address, outside the NodePort range
	b.node.Run(t, "iptables", "-t", "nat", "-N", "KEEPALIVED")
	b.node.Run(t, "iptables", "-t", "nat", "-A", "KEEPALIVED", "-j", "RETURN")
	b.node.Run(t, "iptables", "-t", "nat", "-A", "PREROUTING", "-j", "KEEPALIVED")
	b.node.Run(t, "ipset", "create", "keepalived", "hash:ip")
	foreign := []string{"198.51.100.100:443", "10.200.0.1:80", "198.51.100.1:22"}
	foreignIPVS := b.ipvsadmSave()
	checkForeign := func(when string) {
		t.Helper()
		if got := b.ipvsadmSave(); !containsAll(got, foreignIPVS) {
			t.Fatalf("%s: foreign virtual servers changed:\n%s\nwant:\n%s", when, strings.Join(got, "\n"), strings.Join(foreignIPVS, "\n"))
		}
		if out := b.node.Run(t, "ip", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(out, "198.51.100.100/24") {
			t.Fatalf("%s: hand-added address on eth0 gone: %s", when, out)
		}
		if out := b.node.Run(t, "iptables-save", "-t", "nat"); !strings.Contains(out, "-A PREROUTING -j KEEPALIVED") || !strings.Contains(out, "-A KEEPALIVED -j RETURN") {
			t.Fatalf("%s: foreign chain gone:\n%s", when, out)
		}
		b.node.Run(t, "ipset", "list", "-n", "keepalived")
	}

	exclude := []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")}
	b.opts.ExcludeCIDRs = exclude
	c := testCluster()
	// A service asking for an address in the excluded range is refused by
	// the planner; the excluded virtual server stays the kernel's.
	sp := port("excluded", "", model.TCP, 80)
	sp.ClusterIPs = []netip.Addr{addr("10.96.0.70")}
	sp.ExternalIPs = []netip.Addr{addr("10.200.0.1")}
	c.Services = append(c.Services, sp)
	c.Endpoints[sp.Name] = eps(thisNode, ktest.BackendPort, v4.podA)
	st := b.plan(c)
	if len(st.Refusals) != 1 || st.Refusals[0].Reason != model.ReasonExcludedCIDR {
		t.Fatalf("refusals %v, want the excluded externalIP", st.Refusals)
	}
	p := b.open(ipvs.Options{ExcludeCIDRs: exclude})
	b.full(p, st)
	b.checkPlan(st, foreign...)
	checkForeign("after a full sync")
	b.partial(p, st, "default/web", "default/excluded")
	b.full(p, st)
	b.checkPlan(st, foreign...)
	checkForeign("after more syncs")

	// A protected address put on kube-ipvs0 by hand is gone after the
	// sync its notification kicks, even a partial one.
	hand := hostPrefix(ktest.NodeIPv4)
	b.handAdded = append(b.handAdded, hand)
	b.node.Run(t, "ip", "addr", "add", hand.String(), "dev", addrmgr.Device)
	p.waitKick(t, "protected address added by hand")
	res := b.partial(p, st)
	if slices.Contains(b.kubeIPVS0(), hand.String()) || res.Unbind.Unbound != 1 || !res.AddressesDumped {
		t.Fatalf("protected address still on kube-ipvs0 after a sync: %v (%+v, dumped %v)", b.kubeIPVS0(), res.Unbind, res.AddressesDumped)
	}
	b.checkPlan(st, foreign...)

	// Cleanup, from a restarted proxy that never synced: only foreign state left.
	empty := b.plan(model.Cluster{Nodes: c.Nodes})
	p2 := b.open(ipvs.Options{ExcludeCIDRs: exclude})
	res = b.sync("cleanup", func() (*Result, error) { return p2.app.Cleanup(empty, b.nodeAddrs) })
	t.Logf("cleanup: %+v, unbound %d", res.IPVS, res.Unbind.Unbound)
	if got := b.ipvsadmSave(); !slices.Equal(got, foreignIPVS) {
		t.Errorf("after cleanup, want only the foreign virtual servers:\n%s", strings.Join(got, "\n"))
	}
	if got := b.kubeIPVS0(); len(got) != 0 {
		t.Errorf("kube-ipvs0 after cleanup: %v", got)
	}
	if got := b.ipsetSave(); len(got) != 0 {
		t.Errorf("KUBE- sets after cleanup: %v", got)
	}
	for _, fam := range []string{iptables.FamilyIPv4, iptables.FamilyIPv6} {
		if got := b.proxyRules(fam); len(got) != 2 {
			t.Errorf("%s rules after cleanup: %v", fam, got)
		}
	}
	checkForeign("after cleanup")
	res = b.sync("second cleanup", func() (*Result, error) { return p2.app.Cleanup(empty, b.nodeAddrs) })
	if res.IPVS.Changes() != 0 || res.Unbind.Unbound != 0 {
		t.Errorf("second cleanup changed things: %+v %+v", res.IPVS, res.Unbind)
	}
}

func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// TestKernelGuard: addresses the applier's guard protects are never bound,
// not even for a moment, whatever the desired state says.
func TestKernelGuard(t *testing.T) {
	// 192.0.2.99 becomes protected after planning (a --protected-cidrs the
	// planner was not given); the node addresses are protected for both.
	late := addr("192.0.2.99")
	b := newKBed(t, hostPrefix(late))
	c := testCluster()
	sp := port("late", "", model.TCP, 80)
	sp.ClusterIPs = []netip.Addr{addr("10.96.0.80")}
	sp.ExternalIPs = []netip.Addr{late}
	c.Services = append(c.Services, sp)
	c.Endpoints[sp.Name] = eps(thisNode, ktest.BackendPort, v4.podA)
	st := b.plan(c)
	if !slices.Contains(st.Addresses, hostPrefix(late)) {
		t.Fatalf("the planner did not plan %s: %v", late, st.Addresses)
	}
	// A desired state that names node addresses too (a planner bug).
	bad := *st
	bad.Addresses = append(slices.Clone(st.Addresses), hostPrefix(ktest.NodeIPv4), hostPrefix(ktest.NodeIPv6), hostPrefix(v4.podC))
	slices.SortFunc(bad.Addresses, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })

	p := b.open(ipvs.Options{})
	for i := range 3 {
		var res *Result
		if i == 1 {
			res = b.partial(p, &bad, "default/late")
		} else {
			res = b.full(p, &bad)
		}
		if i == 0 && len(res.Bind.Refused) != 4 {
			t.Errorf("refused %+v, want the 4 protected addresses", res.Bind.Refused)
		}
	}
	// Apart from the refused address, the kernel is the plan.
	want := *st
	want.Addresses = slices.DeleteFunc(slices.Clone(st.Addresses), func(p netip.Prefix) bool { return p == hostPrefix(late) })
	b.checkPlan(&want)
	if names, _ := spread(t, b.cliA.NS, ktest.TCP, ap(v4.web, 80), 2); len(names) != 2 {
		t.Errorf("service traffic next to the refusals: %v", names)
	}
}

// TestKernelRestart: a new proxy process adopts the kernel state without a
// single change and without breaking a connection; stale weight-0 real
// servers left by a crash are put right; services deleted while the proxy
// was down are removed.
func TestKernelRestart(t *testing.T) {
	b := newKBed(t)
	c := testCluster()
	st := b.plan(c)
	p1 := b.open(ipvs.Options{})
	b.full(p1, st)
	b.checkPlan(st)

	conn := dialLine(t, b.cliA.NS, "tcp", ap(v4.drain, 80))
	before, err := conn.ask()
	if err != nil {
		t.Fatal(err)
	}
	spread(t, b.cliA.NS, ktest.TCP, ap(v4.node, 30080), 4) // rule counters move
	counters := func() string { return b.node.Run(t, "iptables-save", "-c") }
	saved := counters()

	// Keep asking through the whole restart: no request may fail.
	stop := make(chan struct{})
	failures := make(chan error, 1)
	go func() {
		defer close(failures)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.cliB.Request(ktest.TCP, ap(v4.web, 80)); err != nil {
				failures <- err
				return
			}
		}
	}()

	p2 := b.open(ipvs.Options{})
	res := b.full(p2, st)
	if n := res.IPVS.Changes() + res.Bind.Bound + res.Unbind.Unbound; n != 0 {
		t.Errorf("restart made %d changes: %+v %+v %+v", n, res.IPVS, res.Bind, res.Unbind)
	}
	b.partial(p2, st, "default/web")
	close(stop)
	if err := <-failures; err != nil {
		t.Errorf("a request failed during the restart: %v", err)
	}
	if after := counters(); after == saved {
		t.Log("iptables counters unchanged: no chain rewritten")
	} else if diffCounters(saved, after) {
		t.Errorf("restart rewrote iptables chains (counters reset)")
	}
	b.checkPlan(st)
	if name, err := conn.ask(); err != nil || name != before {
		t.Errorf("connection across the restart: %q %v, want %s", name, err, before)
	}
	// Our dump reads the kernel exactly as ipvsadm does.
	var dumped []ipvs.VirtualServer
	if err := b.node.Do(func() error { var err error; dumped, err = p2.table.Services(); return err }); err != nil {
		t.Fatal(err)
	}
	if err := diff("Kernel.Services", sorted(lines(ipvs.Save(dumped))), b.ipvsadmSave()); err != nil {
		t.Error(err)
	}

	// A crash left weight-0 real servers: one still desired, one not.
	vs := ap(v4.web, 80)
	b.node.Run(t, "ipvsadm", "-e", "-t", vs, "-r", ap(v4.podA, ktest.BackendPort), "-m", "-w", "0")
	b.node.Run(t, "ipvsadm", "-a", "-t", vs, "-r", ap(v4.podC, ktest.BackendPort), "-m", "-w", "0")
	p3 := b.open(ipvs.Options{GracefulPeriod: time.Second})
	res = b.full(p3, st)
	if res.IPVS.RealServersUpdated != 1 {
		t.Errorf("weight-0 desired real server not restored: %+v", res.IPVS)
	}
	b.checkPlan(st, ap(v4.podC, ktest.BackendPort))
	time.Sleep(1100 * time.Millisecond)
	b.full(p3, st)
	b.checkPlan(st)

	// Services deleted while the proxy was down: a new proxy removes them
	// (ownership comes from kube-ipvs0 and the NodePort range).
	c2 := testCluster()
	c2.Services = slices.DeleteFunc(c2.Services, func(sp model.ServicePort) bool { return sp.Name.Name == "web" || sp.Name.Name == "local" })
	st2 := b.plan(c2)
	p4 := b.open(ipvs.Options{})
	res = b.full(p4, st2)
	t.Logf("restart cleanup: %+v, unbound %d", res.IPVS, res.Unbind.Unbound)
	b.checkPlan(st2)
}

// diffCounters reports whether some rule counter went down between two
// `iptables-save -c`, which happens only when a chain is rewritten.
func diffCounters(before, after string) bool {
	parse := func(s string) map[string]uint64 {
		out := map[string]uint64{}
		for _, l := range lines(s) {
			if !strings.HasPrefix(l, "[") {
				continue
			}
			cnt, rule, _ := strings.Cut(l, " ")
			var pk, by uint64
			fmt.Sscanf(cnt, "[%d:%d]", &pk, &by)
			out[rule] += pk
		}
		return out
	}
	a, z := parse(before), parse(after)
	for r, n := range a {
		if z[r] < n {
			return true
		}
	}
	return false
}

// TestKernelDumpBesideOtherNamespaces: Kernel.Services reads the table as
// `ipvsadm -S -n` shows it even when another namespace holds IPVS services
// and the /proc listing spans many reads (the kernel's /proc iterator then
// loses services; the netlink dump does not).
func TestKernelDumpBesideOtherNamespaces(t *testing.T) {
	restore := func(node *ktest.Node, base byte, n int) {
		var in strings.Builder
		for i := range n {
			vip := netip.AddrFrom4([4]byte{10, 96, base, byte(i)})
			fmt.Fprintf(&in, "-A -t %s -s rr\n", ap(vip, 80))
			for e := range 3 {
				fmt.Fprintf(&in, "-a -t %s -r %s -m -w 1\n", ap(vip, 80), ap(netip.AddrFrom4([4]byte{10, 244, byte(i), byte(e + 1)}), 8080))
			}
			v6 := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, base, byte(i)})
			fmt.Fprintf(&in, "-A -u %s -s rr\n-a -u %s -r %s -m -w 1\n", ap(v6, 53), ap(v6, 53), ap(addr("fd00:10:244::5"), 53))
		}
		if err := node.Do(func() error { return execStdin([]byte(in.String()), "ipvsadm", "-R") }); err != nil {
			t.Fatal(err)
		}
	}
	other := ktest.NewNode(t)
	restore(other, 1, 250)
	node := ktest.NewNode(t)
	restore(node, 2, 200)
	b := &kbed{t: t, node: node}
	var dumped []ipvs.VirtualServer
	if err := node.Do(func() error {
		k, err := ipvskernel.Open()
		if err != nil {
			return err
		}
		defer k.Close()
		dumped, err = k.Services()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := diff("Kernel.Services", sorted(lines(ipvs.Save(dumped))), b.ipvsadmSave()); err != nil {
		t.Fatal(err)
	}
	if len(dumped) != 400 {
		t.Fatalf("dumped %d virtual servers, want 400", len(dumped))
	}
	// Whether the kernel's listing itself lost services this time (it
	// depends on how the two namespaces' services interleave in the hash).
	listed := 0
	for _, l := range lines(node.Run(t, "cat", "/proc/net/ip_vs")) {
		if strings.HasPrefix(l, "TCP ") || strings.HasPrefix(l, "UDP ") {
			listed++
		}
	}
	t.Logf("/proc/net/ip_vs listed %d of the 400 virtual servers; Kernel.Services read all", listed)
}

// TestKernelTimeoutsAndSysctls: `ipvsadm --set` and the sysctls.
func TestKernelTimeoutsAndSysctls(t *testing.T) {
	b := newKBed(t)
	p := b.open(ipvs.Options{})
	err := b.node.Do(func() error {
		if err := p.table.SetTimeouts(900*time.Second, 120*time.Second, 300*time.Second); err != nil {
			return err
		}
		tcp, fin, udp, err := p.table.Timeouts()
		if err != nil {
			return err
		}
		if tcp != 900*time.Second || fin != 120*time.Second || udp != 300*time.Second {
			return fmt.Errorf("timeouts %s %s %s", tcp, fin, udp)
		}
		changed, err := ipvskernel.WriteSysctls("/proc/sys", ipvs.KernelSysctls("6.1.0", true))
		if err != nil {
			return err
		}
		if len(changed) != 2 {
			return fmt.Errorf("second write changed %v, want only the strict-ARP pair", changed)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.node.Run(t, "sysctl", "-n", "net.ipv4.vs.conntrack", "net.ipv4.vs.expire_nodest_conn",
		"net.ipv4.vs.expire_quiescent_template", "net.ipv4.ip_forward", "net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce")
	if got := strings.Fields(out); !slices.Equal(got, []string{"1", "1", "1", "1", "1", "2"}) {
		t.Errorf("sysctls in the node: %v", got)
	}
	if out := b.node.Run(t, "ipvsadm", "-L", "--timeout"); !strings.Contains(out, "900 120 300") {
		t.Errorf("ipvsadm -L --timeout: %s", out)
	}
}
