//go:build kernel

package applier

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// etpLocalCluster is one dual-stack Service with externalTrafficPolicy
// Local on a NodePort (30050), an externalIP and a LoadBalancer IP, whose
// endpoints are the given ones. This node's pod CIDR is pod-c's range:
// pod-c is one of its pods, pod-a (10.244.1.10) plays a pod of another node
// reaching this node unmasqueraded, as on a host-gw network.
func etpLocalCluster(e []model.Endpoint) model.Cluster {
	sp := port("etpl", "", model.TCP, 80)
	sp.ClusterIPs = []netip.Addr{addr("10.96.0.70"), addr("fd00:96::70")}
	sp.NodePort, sp.ExternalPolicyLocal = 30050, true
	sp.ExternalIPs = []netip.Addr{addr("192.0.2.70"), addr("2001:db8:2::70")}
	sp.LoadBalancerIPs = []netip.Addr{addr("203.0.113.70"), addr("2001:db8:3::70")}
	c := model.Cluster{Services: []model.ServicePort{sp}, Endpoints: map[model.ServicePortName][]model.Endpoint{sp.Name: e}}
	c.Nodes = testCluster().Nodes
	c.Nodes[0].PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24"), netip.MustParsePrefix("fd00:10:244:3::/64")}
	return c
}

// TestKernelLocalPolicyFromTheNode sends real traffic to the three external
// addresses of an externalTrafficPolicy Local Service whose only endpoint
// is on another node (pod-b, named on node-b): the node itself and its own
// pod (pod-c) are answered by it, the pod keeping its address; a client on
// the LAN and another node's pod (pod-a) are refused (ECONNREFUSED). When
// an endpoint appears on this node (pod-a, a partial sync), only it serves
// external clients, who keep their address; when it goes, the refusal is
// back. Upstream's SN-61 and SN-47 need the node and pod legs.
func TestKernelLocalPolicyFromTheNode(t *testing.T) {
	b := newKBed(t)
	p := b.open(ipvs.Options{})
	node := b.nodeLocal()
	remote := append(eps(otherNode, ktest.BackendPort, v4.podB), eps(otherNode, ktest.BackendPort, v6.podB)...)
	st := b.plan(etpLocalCluster(remote))
	if len(st.Refusals) != 0 {
		t.Fatalf("plan refused: %v", st.Refusals)
	}
	b.full(p, st)
	b.checkPlan(st)

	type target struct{ what, to string }
	targets := func(i int) []target {
		f := fams[i]
		ext := [2][2]string{{"192.0.2.70", "203.0.113.70"}, {"2001:db8:2::70", "2001:db8:3::70"}}[i]
		return []target{
			{"NodePort", ap(f.node, 30050)},
			{"externalIP", ap(addr(ext[0]), 80)},
			{"LoadBalancer IP", ap(addr(ext[1]), 80)},
		}
	}
	refused := func(t *testing.T, from *ktest.NS, who, to string) {
		t.Helper()
		out, err := from.Request(ktest.TCP, to)
		switch {
		case err == nil:
			t.Errorf("%s from %s: answered %q, want refused (no endpoint on this node)", to, who, out)
		case !errors.Is(err, syscall.ECONNREFUSED):
			t.Errorf("%s from %s: %v, want connection refused", to, who, err)
		}
	}
	noLocal := func(t *testing.T, i int) {
		f := fams[i]
		for _, tg := range targets(i) {
			t.Run(tg.what, func(t *testing.T) {
				name, peer := ask(t, b.node.NS, ktest.TCP, tg.to)
				if name != "pod-b" || !node[peer.String()] {
					t.Errorf("from the node: %s saw %s, want pod-b seeing a node address (masqueraded: a kube-ipvs0 source would not come back)", name, peer)
				}
				name, peer = ask(t, b.podC.NS, ktest.TCP, tg.to)
				if name != "pod-b" || peer != f.podC {
					t.Errorf("from this node's pod-c: %s saw %s, want pod-b seeing pod-c's own %s", name, peer, f.podC)
				}
				refused(t, b.cliA.NS, "client A (external)", tg.to)
				refused(t, b.podA.NS, "pod-a (another node's pod)", tg.to)
			})
		}
	}
	for i, f := range fams {
		t.Run(f.name+"/no local endpoint", func(t *testing.T) { noLocal(t, i) })
	}
	if t.Failed() {
		return
	}

	// An endpoint on this node: external clients reach it alone, with
	// their own address; so does the node.
	local := append(eps(thisNode, ktest.BackendPort, v4.podA, v6.podA), remote...)
	st = b.plan(etpLocalCluster(local))
	b.partial(p, st, "default/etpl")
	// pod-b stays at weight 0 while the connections it served linger
	// (graceful termination): no new connection reaches it.
	b.checkPlan(st, "-w 0")
	for i, f := range fams {
		t.Run(f.name+"/local endpoint", func(t *testing.T) {
			for _, tg := range targets(i) {
				names, peers := spread(t, b.cliA.NS, ktest.TCP, tg.to, 4)
				if names["pod-a"] != 4 || peers[f.cliA.String()] != 4 {
					t.Errorf("%s from client A: answers %v, sources %v; want only pod-a, seeing client A %s", tg.what, names, peers, f.cliA)
				}
				if names, _ := spread(t, b.node.NS, ktest.TCP, tg.to, 4); names["pod-a"] != 4 {
					t.Errorf("%s from the node: answers %v, want only pod-a", tg.what, names)
				}
			}
		})
	}

	// The endpoint gone: back to the node and its pods only.
	st = b.plan(etpLocalCluster(remote))
	b.partial(p, st, "default/etpl")
	b.checkPlan(st, "-w 0")
	for i, f := range fams {
		t.Run(f.name+"/local endpoint gone", func(t *testing.T) { noLocal(t, i) })
	}
}
