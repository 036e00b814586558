//go:build kernel

package recovery

// A Service whose externalIPs include node addresses, in a real kernel with
// two nodes (node-a the ktest node, node-b a namespace on its LAN), each
// running the daemon's kernel path (see hostile_kernel_test.go):
//
//   - default mode: the other externalIP is served on both nodes, neither
//     node's address is bound on either node's kube-ipvs0, and node-a's own
//     address is served only at L4 (a virtual server, no binding);
//   - --refuse-node-external-ips: no virtual server and no binding on a node
//     address; a server listening on node-a's address and the Service's port
//     keeps answering for itself, not for the Service.

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

const refuseOtherExt = "192.0.2.30"

// nodeIPService is default/web with externalIPs node-a's address, node-b's
// address and one ordinary address, port 80, backed by pod-good.
func nodeIPService(b *hbed) *planner.State {
	web := service("default", "web", "10.96.0.30", externalIPs(ktest.NodeIPv4.String(), hNodeBIP, refuseOtherExt))
	goodSvcs, goodSlices := goodObjects()
	return b.sync(append(goodSvcs, web), append(goodSlices, slice(web, goodPod)))
}

func refusalsOf(st *planner.State, service string) []model.Refusal {
	return slices.DeleteFunc(slices.Clone(st.Refusals), func(r model.Refusal) bool { return r.Subject.String() != service })
}

func TestRefuseNodeExternalIPs(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		name := "default"
		if refuse {
			name = "refuse-node-external-ips"
		}
		t.Run(name, func(t *testing.T) {
			a := newHBed(t, refuse)
			nb := a.node.AddClient(t, hNodeB, hNodeBIP)
			b := newPeer(t, a, nb.NS, hNodeB, netip.MustParsePrefix(hNodeBIP+"/24"))
			// node-a's own server on its address and the Service's port
			// (a hostNetwork web server), and node-b's.
			listen(t, a.ns, "node-a-self", goodPort)
			listen(t, nb.NS, "node-b-self", goodPort)

			for _, n := range []*hbed{a, b} {
				st := nodeIPService(n)
				for _, r := range refusalsOf(st, "default/web") {
					t.Logf("%s refusal: %s", n.opts.NodeName, r)
				}
				if len(refusalsOf(st, "default/web")) != 2 {
					t.Errorf("%s: want 2 refusals of default/web (both node addresses), got %v", n.opts.NodeName, refusalsOf(st, "default/web"))
				}
				bound := n.bound()
				for _, ip := range []string{ktest.NodeIPv4.String(), hNodeBIP} {
					if bound[netip.MustParseAddr(ip)] {
						t.Errorf("%s: node address %s bound on kube-ipvs0", n.opts.NodeName, ip)
					}
				}
				if !bound[netip.MustParseAddr(refuseOtherExt)] {
					t.Errorf("%s: externalIP %s not bound", n.opts.NodeName, refuseOtherExt)
				}
				vss := n.virtuals()
				t.Logf("%s: kube-ipvs0 %v; virtual servers %v", n.opts.NodeName, bound, vss)
				own := netip.AddrPortFrom(n.opts.LocalAddrs[0], goodPort).String()
				if vss[own] == refuse {
					t.Errorf("%s: virtual server on its own address %s present=%v with refuse=%v", n.opts.NodeName, own, vss[own], refuse)
				}
			}

			// The ordinary externalIP is served (through node-a, where the
			// LAN client routes it).
			if got, err := a.client.Request(ktest.TCP, refuseOtherExt+":80"); err != nil || !strings.HasPrefix(got, "pod-good ") {
				t.Errorf("client -> %s:80 answered %q, %v", refuseOtherExt, got, err)
			}
			// node-a's address and port: the Service in default mode (L4
			// on a local address), node-a's own server with refuse.
			want := "pod-good "
			if refuse {
				want = "node-a-self "
			}
			if got, err := a.client.Request(ktest.TCP, ktest.NodeIPv4.String()+":80"); err != nil || !strings.HasPrefix(got, want) {
				t.Errorf("client -> node-a %s:80 answered %q, %v; want %q", ktest.NodeIPv4, got, err, want)
			} else {
				t.Logf("client -> node-a %s:80: %q", ktest.NodeIPv4, strings.TrimSpace(got))
			}
			// node-b's address and port, from the client and from node-a:
			// the same on node-b.
			want = "pod-good "
			if refuse {
				want = "node-b-self "
			}
			for _, from := range []*ktest.NS{a.client.NS, a.ns} {
				if got, err := from.Request(ktest.TCP, hNodeBIP+":80"); err != nil || !strings.HasPrefix(got, want) {
					t.Errorf("%s -> node-b %s:80 answered %q, %v; want %q", from.Name, hNodeBIP, got, err, want)
				} else {
					t.Logf("%s -> node-b %s:80: %q", from.Name, hNodeBIP, strings.TrimSpace(got))
				}
			}
			a.checkMonitor()
			b.checkMonitor()
		})
	}
}
