//go:build kernel

package applier

// The kernel tests' bed (kbed): a ktest node namespace with the real
// appliers, the plan's text forms to compare the kernel with, pods and
// clients to send real traffic, and the address monitor. The tests and how
// to run them are in applier_kernel_test.go.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

const (
	thisNode  = "node-a"
	otherNode = "node-b"
	// linePort is where the pods' line servers listen: one answer per line
	// on a connection that stays open (graceful termination, restarts).
	linePort = 9090
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// fam is one IP family of the test cluster.
type fam struct {
	name                         string
	podA, podB, podC, cliA, cliB netip.Addr
	web, sticky, lb, local, hair netip.Addr // ClusterIPs
	drain                        netip.Addr // ClusterIP of the graceful-termination service
	externalIP, lbIP             netip.Addr
	lbAllowed                    netip.Prefix // loadBalancerSourceRanges: cliA only
	node                         netip.Addr
}

var fams = []fam{{
	name: "IPv4",
	podA: addr("10.244.1.10"), podB: addr("10.244.2.10"), podC: addr("10.244.3.10"),
	cliA: addr("198.51.100.11"), cliB: addr("198.51.100.12"),
	web: addr("10.96.0.10"), sticky: addr("10.96.0.20"), lb: addr("10.96.0.30"), local: addr("10.96.0.40"),
	hair: addr("10.96.0.50"), drain: addr("10.96.0.60"),
	externalIP: addr("192.0.2.10"), lbIP: addr("203.0.113.30"),
	lbAllowed: netip.MustParsePrefix("198.51.100.11/32"),
	node:      ktest.NodeIPv4,
}, {
	name: "IPv6",
	podA: addr("fd00:10:244:1::10"), podB: addr("fd00:10:244:2::10"), podC: addr("fd00:10:244:3::10"),
	cliA: addr("2001:db8:100::11"), cliB: addr("2001:db8:100::12"),
	web: addr("fd00:96::10"), sticky: addr("fd00:96::20"), lb: addr("fd00:96::30"), local: addr("fd00:96::40"),
	hair: addr("fd00:96::50"), drain: addr("fd00:96::60"),
	externalIP: addr("2001:db8:2::10"), lbIP: addr("2001:db8:3::30"),
	lbAllowed: netip.MustParsePrefix("2001:db8:100::11/128"),
	node:      ktest.NodeIPv6,
}}

var v4, v6 = fams[0], fams[1]

var clusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}

// both returns the IPv4 and IPv6 value of a per-family field.
func both(f func(fam) netip.Addr) []netip.Addr { return []netip.Addr{f(v4), f(v6)} }

func port(name, portName string, proto model.Protocol, p uint16) model.ServicePort {
	return model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}, Port: portName}, Protocol: proto, Port: p}
}

func eps(node string, p uint16, addrs ...netip.Addr) []model.Endpoint {
	out := make([]model.Endpoint, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, model.Endpoint{Address: a, Port: p, NodeName: node, Ready: true, Serving: true})
	}
	return out
}

// testCluster is every kind of service, dual-stack:
//
//	web      tcp/udp/sctp ClusterIP, TCP NodePort 30080, externalIP; pod-a, pod-b
//	sticky   ClientIP session affinity; pod-a, pod-b
//	lb       LoadBalancer IP with loadBalancerSourceRanges = client A; pod-a, pod-b
//	local    NodePort 30040, externalTrafficPolicy Local; pod-a here, pod-b "on node-b"
//	hairpin  pod-a only (pod-a asks its own service)
//	drain    TCP to the line servers, UDP; pod-a, pod-b (graceful termination)
func testCluster() model.Cluster {
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}}
	add := func(sp model.ServicePort, e ...model.Endpoint) {
		c.Services = append(c.Services, sp)
		c.Endpoints[sp.Name] = e
	}
	ab := func(p uint16) []model.Endpoint { return eps(thisNode, p, v4.podA, v4.podB, v6.podA, v6.podB) }
	for _, p := range []struct {
		name  string
		proto model.Protocol
		port  uint16
	}{{"tcp", model.TCP, 80}, {"udp", model.UDP, 80}, {"sctp", model.SCTP, 80}} {
		sp := port("web", p.name, p.proto, p.port)
		sp.ClusterIPs = both(func(f fam) netip.Addr { return f.web })
		if p.proto == model.TCP {
			sp.NodePort = 30080
			sp.ExternalIPs = both(func(f fam) netip.Addr { return f.externalIP })
		}
		add(sp, ab(ktest.BackendPort)...)
	}
	sp := port("sticky", "", model.TCP, 80)
	sp.ClusterIPs = both(func(f fam) netip.Addr { return f.sticky })
	sp.AffinityTimeout = 10800
	add(sp, ab(ktest.BackendPort)...)

	sp = port("lb", "", model.TCP, 80)
	sp.ClusterIPs = both(func(f fam) netip.Addr { return f.lb })
	sp.LoadBalancerIPs = both(func(f fam) netip.Addr { return f.lbIP })
	sp.LoadBalancerSourceRanges = []netip.Prefix{v4.lbAllowed, v6.lbAllowed}
	add(sp, ab(ktest.BackendPort)...)

	sp = port("local", "", model.TCP, 80)
	sp.ClusterIPs = both(func(f fam) netip.Addr { return f.local })
	sp.NodePort, sp.ExternalPolicyLocal = 30040, true
	add(sp, append(eps(thisNode, ktest.BackendPort, v4.podA, v6.podA), eps(otherNode, ktest.BackendPort, v4.podB, v6.podB)...)...)

	sp = port("hairpin", "", model.TCP, 80)
	sp.ClusterIPs = both(func(f fam) netip.Addr { return f.hair })
	add(sp, eps(thisNode, ktest.BackendPort, v4.podA, v6.podA)...)

	sp = port("drain", "tcp", model.TCP, 80)
	sp.ClusterIPs = both(func(f fam) netip.Addr { return f.drain })
	add(sp, ab(linePort)...)
	sp = port("drain", "udp", model.UDP, 53)
	sp.ClusterIPs = both(func(f fam) netip.Addr { return f.drain })
	add(sp, ab(ktest.BackendPort)...)

	slices.SortFunc(c.Services, func(a, b model.ServicePort) int { return strings.Compare(a.Name.String(), b.Name.String()) })
	c.Nodes = []model.Node{
		{Name: thisNode, Addresses: []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6}},
		{Name: otherNode, Addresses: []netip.Addr{addr("198.51.100.2"), addr("2001:db8:100::2")}},
	}
	return c
}

// setEndpoints replaces one service port's endpoints.
func setEndpoints(c *model.Cluster, name, portName string, e []model.Endpoint) {
	c.Endpoints[model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}, Port: portName}] = e
}

// kbed is one node namespace with three pods (pod-a, pod-b backends; pod-c a
// client inside the cluster CIDR), two clients on the node's LAN (cli-a may
// reach the LoadBalancer IP, cli-b not), kube-ipvs0, and the monitor.
type kbed struct {
	t                *testing.T
	node             *ktest.Node
	podA, podB, podC *ktest.Pod
	cliA, cliB       *ktest.Client
	opts             planner.Options
	guard            *guard.Guard
	nodeAddrs        []netip.Addr
	mon              *ktest.AddrMonitor
	// handAdded are protected addresses the test itself puts on kube-ipvs0.
	handAdded []netip.Prefix
}

func newKBed(t *testing.T, protected ...netip.Prefix) *kbed {
	t.Helper()
	b := &kbed{t: t, node: ktest.NewNode(t)}
	b.podA = b.node.AddPod(t, "pod-a", v4.podA.String(), v6.podA.String())
	b.podB = b.node.AddPod(t, "pod-b", v4.podB.String(), v6.podB.String())
	b.podC = b.node.AddPod(t, "pod-c", v4.podC.String(), v6.podC.String())
	b.cliA = b.node.AddClient(t, "cli-a", v4.cliA.String(), v6.cliA.String())
	b.cliB = b.node.AddClient(t, "cli-b", v4.cliB.String(), v6.cliB.String())
	for _, p := range []*ktest.Pod{b.podA, b.podB} {
		lineServer(t, p)
	}
	b.nodeAddrs = []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6}
	b.opts = planner.Options{
		NodeName:      thisNode,
		LocalAddrs:    []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6, ktest.PodGatewayV4, ktest.PodGatewayV6},
		Scheduler:     "rr",
		ClusterCIDRs:  clusterCIDRs,
		MasqueradeBit: planner.DefaultMasqueradeBit,
	}
	// The applier's guard knows what the planner's knows, and protected
	// (addresses the planner was not told about, as when a node address
	// appears between planning and applying).
	b.guard = guard.New(guard.Inputs{
		LocalAddrs:     b.opts.LocalAddrs,
		Nodes:          testCluster().Nodes,
		PodCIDRs:       clusterCIDRs,
		ProtectedCIDRs: protected,
	})
	err := b.node.Do(func() error {
		rel, err := ipvskernel.Release()
		if err != nil {
			return err
		}
		_, err = ipvskernel.WriteSysctls("/proc/sys", ipvs.KernelSysctls(rel, false))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// kube-ipvs0 exists before any proxy runs, so the monitor sees every
	// address the proxies ever put on it.
	link, err := addrkernel.EnsureDevice(b.node.Netlink(t))
	if err != nil {
		t.Fatal(err)
	}
	b.mon = b.node.MonitorAddrs(t, link.Index())
	t.Cleanup(b.checkMonitor)
	return b
}

func (b *kbed) plan(c model.Cluster) *planner.State {
	st := planner.Plan(c, b.opts)
	return &st
}

// kproxy is one proxy process's kernel side, opened inside the node.
type kproxy struct {
	table *ipvskernel.Table
	rules *iptables.Syncer
	rec   *ipvs.Reconciler
	mgr   *addrmgr.Manager
	app   *Applier
	// link counts kube-ipvs0 dumps; kicks receives the address
	// manager's kicks (coalesced), as the daemon's loop does.
	link  *countingLink
	kicks chan struct{}
	// others receives what the watch says of the other links' addresses
	// (addrkernel.Link.OtherLinks), as the daemon's node-address cache.
	others chan bool
}

// countingLink is kube-ipvs0 counting its dumps (Link.Addrs calls); it
// watches through the kernel link.
type countingLink struct {
	*addrkernel.Link
	mu    sync.Mutex
	dumps int
}

func (c *countingLink) Addrs() ([]netip.Prefix, error) {
	c.mu.Lock()
	c.dumps++
	c.mu.Unlock()
	return c.Link.Addrs()
}

func (c *countingLink) Dumps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dumps
}

// waitKick waits for the address manager's kick, as the daemon's loop
// would before its next sync.
func (p *kproxy) waitKick(t *testing.T, what string) {
	t.Helper()
	select {
	case <-p.kicks:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no kick from the kube-ipvs0 watch in 10 s", what)
	}
}

// open starts a proxy in the node, as a (re)started process would: new
// sockets, new reconciler and mirrors, nothing remembered.
func (b *kbed) open(opts ipvs.Options) *kproxy {
	b.t.Helper()
	p := &kproxy{}
	var (
		ct   *ipvskernel.Conntrack
		nl   *netlink.Handle
		link *addrkernel.Link
	)
	err := b.node.Do(func() error {
		var err error
		if p.table, err = ipvskernel.Open(); err != nil {
			return err
		}
		if ct, err = ipvskernel.OpenConntrack(); err != nil {
			return err
		}
		if nl, err = netlink.NewHandle(); err != nil {
			return err
		}
		if link, err = addrkernel.EnsureDevice(nl); err != nil {
			return err
		}
		p.rules, err = iptableskernel.NewSyncer(nil)
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, stopWatch := context.WithCancel(context.Background())
	b.t.Cleanup(func() { stopWatch(); p.table.Close(); ct.Close(); nl.Close(); p.rules.Close() })
	opts.Conntrack = ct
	p.rec = ipvs.NewReconciler(p.table, opts)
	p.link = &countingLink{Link: link}
	p.kicks = make(chan struct{}, 1)
	p.others = make(chan bool, 64)
	link.OtherLinks = func(lost bool) {
		select {
		case p.others <- lost:
		default:
		}
	}
	p.mgr = addrmgr.NewManager(p.link, b.guard, nil)
	// As the daemon: the manager follows kube-ipvs0 (from the node's
	// namespace, the handle's).
	err = b.node.Do(func() error {
		return p.mgr.Watch(ctx, func() {
			select {
			case p.kicks <- struct{}{}:
			default:
			}
		})
	})
	if err != nil {
		b.t.Fatal(err)
	}
	p.app = New(p.rec, p.mgr, p.rules, nil)
	return p
}

func (b *kbed) sync(what string, f func() (*Result, error)) *Result {
	b.t.Helper()
	var res *Result
	err := b.node.Do(func() error {
		var err error
		res, err = f()
		return err
	})
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	if err := res.Err(); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return res
}

func (b *kbed) full(p *kproxy, st *planner.State) *Result {
	b.t.Helper()
	return b.sync("full sync", func() (*Result, error) { return p.app.Full(st, b.nodeAddrs) })
}

// partial is a partial sync of the changed Services, written "namespace/name".
func (b *kbed) partial(p *kproxy, st *planner.State, changed ...string) *Result {
	b.t.Helper()
	return b.sync("partial sync", func() (*Result, error) { return p.app.Partial(st, svcNames(changed...)...) })
}

// --- the kernel's state in the plan's text forms ---

func lines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func sorted(ls []string) []string { slices.Sort(ls); return ls }

// ipvsadmSave is `ipvsadm -S -n` in the node, sorted (ipvsadm prints in
// hash order), without lines mentioning any of skip.
func (b *kbed) ipvsadmSave(skip ...string) []string {
	return sorted(slices.DeleteFunc(lines(b.node.Run(b.t, "ipvsadm", "-S", "-n")), func(l string) bool {
		return slices.ContainsFunc(skip, func(s string) bool { return strings.Contains(l, s) })
	}))
}

// kubeIPVS0 is `ip -o addr show dev kube-ipvs0`, the prefixes only, sorted.
func (b *kbed) kubeIPVS0() []string {
	var out []string
	for _, l := range lines(b.node.Run(b.t, "ip", "-o", "addr", "show", "dev", addrmgr.Device)) {
		if f := strings.Fields(l); len(f) >= 4 {
			out = append(out, f[3])
		}
	}
	return sorted(out)
}

// ipsetSave is `ipset save` of the KUBE- sets in the plan's form: sets by
// name, members sorted, the create line without the kernel's "bucketsize N
// initval 0x..." and with the initial hashsize (the kernel grows it).
func (b *kbed) ipsetSave() []string {
	blocks := map[string][]string{}
	save, err := b.node.IPSetSave()
	if err != nil {
		b.t.Fatal(err)
	}
	for _, l := range lines(save) {
		f := strings.Fields(l)
		if len(f) < 2 || !strings.HasPrefix(f[1], "KUBE-") {
			continue
		}
		if f[0] == "create" {
			if i := slices.Index(f, "bucketsize"); i > 0 {
				f = f[:i]
			}
			if i := slices.Index(f, "hashsize"); i > 0 && i+1 < len(f) {
				f[i+1] = fmt.Sprint(iptables.HashSize)
			}
			l = strings.Join(f, " ")
		}
		blocks[f[1]] = append(blocks[f[1]], l)
	}
	return joinBlocks(blocks)
}

func joinBlocks(blocks map[string][]string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(blocks)) {
		bl := blocks[name]
		slices.Sort(bl[1:])
		out = append(out, bl...)
	}
	return out
}

// planIPSets is the plan's `# ipset` section, members sorted as text.
func planIPSets(st *planner.State) []string {
	blocks := map[string][]string{}
	for _, l := range lines(string(iptables.AppendSave(nil, st.IPSets))) {
		f := strings.Fields(l)
		blocks[f[1]] = append(blocks[f[1]], l)
	}
	return joinBlocks(blocks)
}

// proxyRules is `iptables-save` (`ip6tables-save`) of the nat and filter
// tables restricted to the proxy's rules: every rule of a KUBE- chain and
// every rule jumping to one, "-A CHAIN ..." in the kernel's order per chain,
// chains sorted.
func (b *kbed) proxyRules(family string) []string {
	bin := "iptables-save"
	if family == iptables.FamilyIPv6 {
		bin = "ip6tables-save"
	}
	var out []string
	for _, table := range []string{"nat", "filter"} {
		byChain := map[string][]string{}
		for _, l := range lines(b.node.Run(b.t, bin, "-t", table)) {
			if !strings.HasPrefix(l, "-A ") {
				continue
			}
			f := strings.Fields(l)
			j := slices.Index(f, "-j")
			if strings.HasPrefix(f[1], "KUBE-") || j > 0 && j+1 < len(f) && strings.HasPrefix(f[j+1], "KUBE-") {
				byChain[f[1]] = append(byChain[f[1]], l)
			}
		}
		out = append(out, "*"+table)
		for _, c := range slices.Sorted(maps.Keys(byChain)) {
			out = append(out, byChain[c]...)
		}
	}
	return out
}

// planRules is the plan's ruleset of family in proxyRules' layout; a family
// the plan has no ruleset for has no proxy rules at all.
func planRules(st *planner.State, family string) []string {
	out := []string{"*nat", "*filter"}
	if slices.ContainsFunc(st.Rulesets, func(rs iptables.Ruleset) bool { return rs.Family == family }) {
		out = nil
	}
	for _, rs := range st.Rulesets {
		if rs.Family != family {
			continue
		}
		for _, t := range rs.Tables {
			byChain := map[string][]string{}
			for _, c := range t.Chains {
				for _, r := range c.Rules {
					byChain[c.Name] = append(byChain[c.Name], string(iptables.AppendRule(nil, c.Name, r)))
				}
			}
			out = append(out, "*"+t.Name)
			for _, c := range slices.Sorted(maps.Keys(byChain)) {
				out = append(out, byChain[c]...)
			}
		}
	}
	return out
}

func diff(what string, got, want []string) error {
	if slices.Equal(got, want) {
		return nil
	}
	var b strings.Builder
	for _, l := range want {
		if !slices.Contains(got, l) {
			b.WriteString("\n  missing: " + l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			b.WriteString("\n  extra:   " + l)
		}
	}
	if b.Len() == 0 {
		b.WriteString("\n  (same lines, other order)\n  got:  " + strings.Join(got, "\n        ") + "\n  want: " + strings.Join(want, "\n        "))
	}
	return fmt.Errorf("%s differs from the plan:%s", what, b.String())
}

// checkPlan compares the kernel with every text form of the plan; ipvsadm
// lines mentioning any of skip (foreign virtual servers) are left out.
func (b *kbed) checkPlan(st *planner.State, skip ...string) {
	b.t.Helper()
	errs := []error{
		diff("ipvsadm -S -n", b.ipvsadmSave(skip...), sorted(lines(ipvs.Save(st.VirtualServers)))),
		diff("ip -o addr show dev kube-ipvs0", b.kubeIPVS0(), sorted(prefixStrings(st.Addresses))),
		diff("ipset save", b.ipsetSave(), planIPSets(st)),
		diff("iptables-save", b.proxyRules(iptables.FamilyIPv4), planRules(st, iptables.FamilyIPv4)),
		diff("ip6tables-save", b.proxyRules(iptables.FamilyIPv6), planRules(st, iptables.FamilyIPv6)),
	}
	if err := errors.Join(errs...); err != nil {
		b.t.Fatal(err)
	}
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// --- traffic ---

func ap(a netip.Addr, p uint16) string { return netip.AddrPortFrom(a, p).String() }

// ask sends one request and returns the backend's name and the source
// address it saw.
func ask(t *testing.T, from *ktest.NS, proto ktest.Proto, to string) (name string, peer netip.Addr) {
	t.Helper()
	out := from.MustRequest(t, proto, to)
	n, p, _ := strings.Cut(out, " ")
	a, err := netip.ParseAddr(p)
	if err != nil {
		t.Fatalf("%s to %s: answer %q", proto, to, out)
	}
	return n, a
}

// spread sends n requests on new connections and counts the answers per
// backend and per source address seen.
func spread(t *testing.T, from *ktest.NS, proto ktest.Proto, to string, n int) (names, peers map[string]int) {
	t.Helper()
	names, peers = map[string]int{}, map[string]int{}
	for range n {
		name, peer := ask(t, from, proto, to)
		names[name]++
		peers[peer.String()]++
	}
	return names, peers
}

// nodeLocal is every address of the node on an interface other than
// kube-ipvs0: what a backend may see as the source of masqueraded traffic.
func (b *kbed) nodeLocal() map[string]bool {
	out := map[string]bool{}
	for _, l := range lines(b.node.Run(b.t, "ip", "-o", "addr", "show")) {
		f := strings.Fields(l)
		if len(f) < 4 || f[1] == addrmgr.Device {
			continue
		}
		if p, err := netip.ParsePrefix(f[3]); err == nil {
			out[p.Addr().String()] = true
		}
	}
	return out
}

// lineServer makes pod answer each line on a TCP connection with "NAME
// PEER", keeping the connection open, on linePort.
func lineServer(t *testing.T, p *ktest.Pod) {
	var l net.Listener
	err := p.Do(func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", linePort))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	// Close the server side too: a connection whose real server was
	// deleted never sees the client's FIN.
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, p.Name+" "+peer.String()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// lineConn is a client connection to a line server through a VIP.
type lineConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialLine(t *testing.T, from *ktest.NS, proto, to string) *lineConn {
	t.Helper()
	var c net.Conn
	err := from.Do(func() error {
		var err error
		// TCG on a loaded host: allow a lost SYN or two.
		c, err = net.DialTimeout(proto, to, 10*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s %s: %v", proto, to, err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineConn{c: c, r: bufio.NewReader(c)}
}

// ask writes one line and reads the answer's first word, the backend name.
func (l *lineConn) ask() (string, error) {
	l.c.SetDeadline(time.Now().Add(ktest.RequestTimeout))
	if _, err := io.WriteString(l.c, "ping\n"); err != nil {
		return "", err
	}
	if _, ok := l.c.(*net.UDPConn); ok {
		buf := make([]byte, 512)
		n, err := l.c.Read(buf)
		if err != nil {
			return "", err
		}
		name, _, _ := strings.Cut(string(buf[:n]), " ")
		return name, nil
	}
	s, err := l.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	name, _, _ := strings.Cut(s, " ")
	return name, nil
}

// nodeListener listens on the node itself on every address, port p, as an
// sshd would, answering "node PEER".
func (b *kbed) nodeListener(p int) {
	var l net.Listener
	if err := b.node.Do(func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", p))
		return err
	}); err != nil {
		b.t.Fatal(err)
	}
	done := make(chan struct{})
	b.t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "node "+c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String()+"\n")
			c.Close()
		}
	}()
}

// --- the address monitor ---

// checkMonitor fails the test if any protected address appeared on
// kube-ipvs0, other than those the test added by hand.
func (b *kbed) checkMonitor() {
	seen := b.mon.Stop()
	for _, p := range seen {
		if b.guard.Check(p.Addr()).Protected && !slices.Contains(b.handAdded, p) {
			b.t.Errorf("address monitor: protected address %s appeared on kube-ipvs0", p)
		}
	}
	b.t.Logf("address monitor: %d additions on kube-ipvs0, none protected unless added by the test", len(seen))
}

// --- the tests ---
