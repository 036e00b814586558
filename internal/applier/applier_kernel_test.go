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
//	go test -c -tags kernel -o /tmp/applier.test ./internal/applier/
//	go run ./test/vmtest/cmd/vmrun -- /tmp/applier.test -test.v

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
	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
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
