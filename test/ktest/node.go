package ktest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Addresses of the bed's topology. Pods get /32 and /128 host routes from
// the node; the node reaches them through a veth with a fixed gateway address
// on its side. Clients sit on the node's "LAN": a bridge named eth0 in the
// node namespace holding NodeIPv4/NodeIPv6, each client's veth plugged into it.
var (
	// NodeIPv4 and NodeIPv6 are the node's addresses on eth0 (its LAN side),
	// the addresses NodePort traffic from a client is sent to.
	NodeIPv4 = netip.MustParseAddr("198.51.100.1")
	NodeIPv6 = netip.MustParseAddr("2001:db8:100::1")
	// PodGatewayV4 and PodGatewayV6 are the node-side addresses of every pod
	// veth, the pods' default gateway (`ip route add default via 169.254.1.1`).
	PodGatewayV4 = netip.MustParseAddr("169.254.1.1")
	PodGatewayV6 = netip.MustParseAddr("fe80::1")
)

// Modules are loaded once per test binary by NewNode; a failure fails the test.
var Modules = []string{
	"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_wlc", "ip_vs_sh", "ip_vs_mh",
	"nf_conntrack", "dummy", "veth", "bridge", "sctp",
}

var (
	modulesOnce sync.Once
	modulesErr  error
)

// requireKernel fails the test (never skips) unless we are root and IPVS loads.
func requireKernel(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("ktest: kernel tests need root: run them in the VM (go run ./test/vmtest/cmd/vmrun -- X.test)")
	}
	modulesOnce.Do(func() {
		if out, err := exec.Command("modprobe", append([]string{"-a"}, Modules...)...).CombinedOutput(); err != nil {
			modulesErr = fmt.Errorf("modprobe -a %s: %w: %s", strings.Join(Modules, " "), err, out)
			return
		}
		if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
			modulesErr = fmt.Errorf("no IPVS in this kernel: %w", err)
		}
	})
	if modulesErr != nil {
		t.Fatalf("ktest: kernel lacks what the tests need (run them in the VM): %v", modulesErr)
	}
}

// Node is a fresh network namespace playing a Kubernetes node: lo up,
// forwarding on, IPv6 DAD off, the IPVS modules loaded. It owns its pods and
// clients and deletes them all at t.Cleanup.
type Node struct {
	*NS
	mu      sync.Mutex
	nPods   int
	nClient int
	bridge  bool
	pods    []*Pod
	clients []*Client
}

// NewNode creates a node namespace that is removed, with its pods and
// clients, when the test ends (or at Close).
func NewNode(t testing.TB) *Node {
	t.Helper()
	requireKernel(t)
	ns, err := newNS("node")
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{NS: ns}
	t.Cleanup(n.Close)
	for _, kv := range [][2]string{
		{"net/ipv4/ip_forward", "1"},
		{"net/ipv6/conf/all/forwarding", "1"},
	} {
		if err := n.Sysctl(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// Close deletes the node's pods and clients, then the node namespace.
func (n *Node) Close() {
	n.mu.Lock()
	pods, clients := n.pods, n.clients
	n.pods, n.clients = nil, nil
	n.mu.Unlock()
	for _, p := range pods {
		p.Close()
	}
	for _, c := range clients {
		c.Close()
	}
	n.NS.Close()
}

// Pod is a namespace joined to its node by a veth pair (eth0 on the pod
// side, vethN on the node side), running a backend on BackendPort for TCP,
// UDP and SCTP that answers every request with "NAME SOURCE-ADDRESS".
type Pod struct {
	*NS
	Name string
	// Addrs are the pod's addresses (one or two families).
	Addrs []netip.Addr
	// HostVeth is the node-side interface name.
	HostVeth string
}

// BackendPort is where every pod's backend listens (TCP, UDP and SCTP).
const BackendPort = 8080

// AddPod creates a pod namespace with the given addresses ("10.244.0.5",
// "fd00:10:244::5"); with none it gets 10.244.0.N and fd00:10:244::N. The
// pod's backend is listening when AddPod returns; Listen adds ports.
// Node: `ip route add ADDR/32 dev vethN`; pod: `default via 169.254.1.1` and
// `default via fe80::1`.
func (n *Node) AddPod(t testing.TB, name string, addrs ...string) *Pod {
	t.Helper()
	n.mu.Lock()
	n.nPods++
	idx := n.nPods
	n.mu.Unlock()
	ips, err := parseAddrs(addrs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ips) == 0 {
		ips = []netip.Addr{
			netip.AddrFrom4([4]byte{10, 244, byte(idx >> 8), byte(idx)}),
			netip.MustParseAddr(fmt.Sprintf("fd00:10:244::%x", idx)),
		}
	}
	ns, err := newNS("pod")
	if err != nil {
		t.Fatal(err)
	}
	p := &Pod{NS: ns, Name: name, Addrs: ips, HostVeth: fmt.Sprintf("veth%d", idx)}
	n.mu.Lock()
	n.pods = append(n.pods, p)
	n.mu.Unlock()
	if err := n.wirePod(p); err != nil {
		t.Fatalf("add pod %s: %v", name, err)
	}
	for _, proto := range []Proto{TCP, UDP, SCTP} {
		p.Listen(t, proto, BackendPort)
	}
	return p
}

func (n *Node) wirePod(p *Pod) error {
	nh, err := netlink.NewHandleAt(n.handle)
	if err != nil {
		return err
	}
	defer nh.Close()
	ph, err := netlink.NewHandleAt(p.handle)
	if err != nil {
		return err
	}
	defer ph.Close()
	hostLink, podLink, err := vethPair(nh, ph, p.HostVeth, p.handle)
	if err != nil {
		return err
	}
	// Node side: gateway addresses, host routes to the pod.
	if err := addAddr(nh, hostLink, netip.PrefixFrom(PodGatewayV4, 32)); err != nil {
		return err
	}
	if err := addAddr(nh, hostLink, netip.PrefixFrom(PodGatewayV6, 64)); err != nil {
		return err
	}
	// Pod side: its addresses, default routes via the node.
	for _, a := range p.Addrs {
		if err := addAddr(ph, podLink, netip.PrefixFrom(a, a.BitLen())); err != nil {
			return err
		}
		if err := nh.RouteAdd(&netlink.Route{LinkIndex: hostLink.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(a, a.BitLen())), Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("ip route add %s dev %s: %w", a, p.HostVeth, err)
		}
	}
	gw4 := prefixNet(netip.PrefixFrom(PodGatewayV4, 32))
	if err := ph.RouteAdd(&netlink.Route{LinkIndex: podLink.Attrs().Index, Dst: gw4, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("pod: ip route add %s dev eth0: %w", PodGatewayV4, err)
	}
	if err := ph.RouteAdd(&netlink.Route{LinkIndex: podLink.Attrs().Index, Gw: PodGatewayV4.AsSlice()}); err != nil {
		return fmt.Errorf("pod: ip route add default via %s: %w", PodGatewayV4, err)
	}
	if err := ph.RouteAdd(&netlink.Route{LinkIndex: podLink.Attrs().Index, Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, Gw: PodGatewayV6.AsSlice()}); err != nil {
		return fmt.Errorf("pod: ip -6 route add default via %s: %w", PodGatewayV6, err)
	}
	return nil
}

// Client is a namespace outside the node on the node's LAN (bridge eth0 in
// the node namespace), for NodePort, externalIP and LoadBalancer traffic. Its
// default routes point at NodeIPv4 and NodeIPv6.
type Client struct {
	*NS
	Name  string
	Addrs []netip.Addr
}

// AddClient creates a client namespace with the given addresses (plain, on
// the LAN's /24 and /64); with none it gets 198.51.100.(10+N) and
// 2001:db8:100::(10+N).
func (n *Node) AddClient(t testing.TB, name string, addrs ...string) *Client {
	t.Helper()
	n.mu.Lock()
	n.nClient++
	idx := n.nClient
	n.mu.Unlock()
	ips, err := parseAddrs(addrs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ips) == 0 {
		ips = []netip.Addr{
			netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + idx)}),
			netip.MustParseAddr(fmt.Sprintf("2001:db8:100::%x", 10+idx)),
		}
	}
	ns, err := newNS("client")
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{NS: ns, Name: name, Addrs: ips}
	n.mu.Lock()
	n.clients = append(n.clients, c)
	n.mu.Unlock()
	if err := n.wireClient(c, idx); err != nil {
		t.Fatalf("add client %s: %v", name, err)
	}
	return c
}

func (n *Node) wireClient(c *Client, idx int) error {
	nh, err := netlink.NewHandleAt(n.handle)
	if err != nil {
		return err
	}
	defer nh.Close()
	ch, err := netlink.NewHandleAt(c.handle)
	if err != nil {
		return err
	}
	defer ch.Close()
	br, err := n.lan(nh)
	if err != nil {
		return err
	}
	hostLink, cLink, err := vethPair(nh, ch, fmt.Sprintf("cveth%d", idx), c.handle)
	if err != nil {
		return err
	}
	if err := nh.LinkSetMaster(hostLink, br); err != nil {
		return fmt.Errorf("ip link set %s master eth0: %w", hostLink.Attrs().Name, err)
	}
	for _, a := range c.Addrs {
		bits := 24
		gw := NodeIPv4
		if a.Is6() {
			bits, gw = 64, NodeIPv6
		}
		if err := addAddr(ch, cLink, netip.PrefixFrom(a, bits)); err != nil {
			return err
		}
		if err := ch.RouteAdd(&netlink.Route{LinkIndex: cLink.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
			return fmt.Errorf("client: ip route add default via %s: %w", gw, err)
		}
	}
	return nil
}

// lan returns the node's bridge eth0 holding the node addresses, creating it once.
func (n *Node) lan(nh *netlink.Handle) (netlink.Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.bridge {
		return nh.LinkByName("eth0")
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}}
	if err := nh.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("ip link add eth0 type bridge: %w", err)
	}
	if err := nh.LinkSetUp(br); err != nil {
		return nil, err
	}
	if err := addAddr(nh, br, netip.PrefixFrom(NodeIPv4, 24)); err != nil {
		return nil, err
	}
	if err := addAddr(nh, br, netip.PrefixFrom(NodeIPv6, 64)); err != nil {
		return nil, err
	}
	n.bridge = true
	return br, nil
}

// vethPair creates HOSTNAME in the namespace of nh and its peer as eth0 in
// peerNS, both up.
func vethPair(nh, ph *netlink.Handle, hostName string, peerNS netns.NsHandle) (netlink.Link, netlink.Link, error) {
	tmp := "kt" + randHex(5)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostName}, PeerName: tmp}
	if err := nh.LinkAdd(veth); err != nil {
		return nil, nil, fmt.Errorf("ip link add %s type veth: %w", hostName, err)
	}
	peer, err := nh.LinkByName(tmp)
	if err != nil {
		return nil, nil, err
	}
	if err := nh.LinkSetNsFd(peer, int(peerNS)); err != nil {
		return nil, nil, fmt.Errorf("ip link set %s netns: %w", tmp, err)
	}
	peer, err = ph.LinkByName(tmp)
	if err != nil {
		return nil, nil, err
	}
	if err := ph.LinkSetName(peer, "eth0"); err != nil {
		return nil, nil, err
	}
	if err := ph.LinkSetUp(peer); err != nil {
		return nil, nil, err
	}
	host, err := nh.LinkByName(hostName)
	if err != nil {
		return nil, nil, err
	}
	if err := nh.LinkSetUp(host); err != nil {
		return nil, nil, err
	}
	return host, peer, nil
}

// addAddr is `ip addr add PREFIX dev LINK nodad`.
func addAddr(h *netlink.Handle, l netlink.Link, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: prefixNet(p)}
	if p.Addr().Is6() {
		a.Flags = 0x02 // IFA_F_NODAD
	}
	if err := h.AddrAdd(l, a); err != nil {
		return fmt.Errorf("ip addr add %s dev %s: %w", p, l.Attrs().Name, err)
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func parseAddrs(in []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range in {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("ktest: address %q: %w", s, err)
		}
		out = append(out, a)
	}
	return out, nil
}
