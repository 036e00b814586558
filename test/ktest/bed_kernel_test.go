//go:build kernel

package ktest_test

// The bed's own proof: with nothing of the proxy involved, only ip and
// ipvsadm, a ClusterIP-like virtual server on kube-ipvs0 and a NodePort-like
// one on the node's LAN address round-robin real TCP, UDP and SCTP requests
// across two pod namespaces, over IPv4 and IPv6. If this fails, no other
// kernel test's result means anything.

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

var (
	bedVIPs = map[string]netip.Addr{
		"ipv4": netip.MustParseAddr("10.96.0.10"),
		"ipv6": netip.MustParseAddr("fd00:10:96::10"),
	}
	bedNodeIPs = map[string]netip.Addr{"ipv4": ktest.NodeIPv4, "ipv6": ktest.NodeIPv6}
)

const (
	bedClusterPort  = 80
	bedNodePort     = 30080
	bedRequestCount = 6
)

// ipvsadmSwitch is ipvsadm's service switch for p.
func ipvsadmSwitch(p ktest.Proto) string {
	switch p {
	case ktest.UDP:
		return "-u"
	case ktest.SCTP:
		return "--sctp-service"
	}
	return "-t"
}

func TestBedRoundRobin(t *testing.T) {
	node := ktest.NewNode(t)
	podA := node.AddPod(t, "pod-a")
	podB := node.AddPod(t, "pod-b")
	client := node.AddClient(t, "client")

	// kube-proxy's layout: a dummy kept down, each VIP a host prefix on it.
	node.RunInput(t, fmt.Sprintf("link add kube-ipvs0 type dummy\n"+
		"addr add %s/32 dev kube-ipvs0\n"+
		"addr add %s/128 dev kube-ipvs0 nodad noprefixroute\n", bedVIPs["ipv4"], bedVIPs["ipv6"]),
		"ip", "-batch", "-")
	var rules strings.Builder
	for fam, vip := range bedVIPs {
		for _, proto := range []ktest.Proto{ktest.TCP, ktest.UDP, ktest.SCTP} {
			for _, front := range []netip.AddrPort{
				netip.AddrPortFrom(vip, bedClusterPort),
				netip.AddrPortFrom(bedNodeIPs[fam], bedNodePort),
			} {
				sw := ipvsadmSwitch(proto)
				fmt.Fprintf(&rules, "-A %s %s -s rr\n", sw, front)
				for _, p := range []*ktest.Pod{podA, podB} {
					rs := netip.AddrPortFrom(podAddr(t, p, fam), ktest.BackendPort)
					fmt.Fprintf(&rules, "-a %s %s -r %s -m -w 1\n", sw, front, rs)
				}
			}
		}
	}
	node.RunInput(t, rules.String(), "ipvsadm", "-R")
	t.Logf("ipvsadm -S -n:\n%s", node.Run(t, "ipvsadm", "-S", "-n"))

	for _, fam := range []string{"ipv4", "ipv6"} {
		for _, proto := range []ktest.Proto{ktest.TCP, ktest.UDP, ktest.SCTP} {
			t.Run(fmt.Sprintf("%s/%s/ClusterIP-from-node", fam, proto), func(t *testing.T) {
				vip := netip.AddrPortFrom(bedVIPs[fam], bedClusterPort)
				checkRoundRobin(t, node.NS, proto, vip, netip.Addr{})
			})
			t.Run(fmt.Sprintf("%s/%s/NodePort-from-client", fam, proto), func(t *testing.T) {
				np := netip.AddrPortFrom(bedNodeIPs[fam], bedNodePort)
				// IPVS NAT rewrites only the destination: the pod sees the client.
				checkRoundRobin(t, client.NS, proto, np, clientAddr(t, client, fam))
			})
		}
	}
}

// checkRoundRobin sends bedRequestCount requests from ns to front and wants
// them split evenly between pod-a and pod-b, each answer naming the source
// the pod saw: wantPeer when valid.
func checkRoundRobin(t *testing.T, ns *ktest.NS, proto ktest.Proto, front netip.AddrPort, wantPeer netip.Addr) {
	t.Helper()
	hits := map[string]int{}
	for i := 0; i < bedRequestCount; i++ {
		out := ns.MustRequest(t, proto, front.String())
		name, peer, ok := strings.Cut(out, " ")
		if !ok {
			t.Fatalf("answer %q: want NAME PEER", out)
		}
		if wantPeer.IsValid() && peer != wantPeer.String() {
			t.Errorf("%s saw peer %s, want %s", name, peer, wantPeer)
		}
		hits[name]++
	}
	want := map[string]int{"pod-a": bedRequestCount / 2, "pod-b": bedRequestCount / 2}
	if fmt.Sprint(hits) != fmt.Sprint(want) {
		t.Errorf("%s %s: hits %v, want %v (rr over two backends)", proto, front, hits, want)
	}
}

func podAddr(t *testing.T, p *ktest.Pod, fam string) netip.Addr {
	t.Helper()
	for _, a := range p.Addrs {
		if a.Is4() == (fam == "ipv4") {
			return a
		}
	}
	t.Fatalf("pod %s has no %s address", p.Name, fam)
	return netip.Addr{}
}

func clientAddr(t *testing.T, c *ktest.Client, fam string) netip.Addr {
	t.Helper()
	for _, a := range c.Addrs {
		if a.Is4() == (fam == "ipv4") {
			return a
		}
	}
	t.Fatalf("client %s has no %s address", c.Name, fam)
	return netip.Addr{}
}
