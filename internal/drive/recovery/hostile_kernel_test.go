//go:build kernel

package recovery

// The hostile table in a real kernel: Services and EndpointSlices as the
// API server hands them over go through the daemon's own path —
// convert.Convert, planner.Plan, planner.GuardInputs for the address
// manager's guard, internal/drive/applier full sync on ipvskernel.Table,
// addrkernel.Link and iptables.Syncer — inside a ktest node namespace.
// Each input is served or refused with its documented reason code, no
// protected address ever appears on kube-ipvs0 (a netlink monitor watches
// every addition), and the good services keep answering real TCP requests
// from a client on the node's LAN before, during and after.
//
//	go test -c -tags kernel -o /tmp/rec.test ./internal/drive/recovery/
//	go run ./test/vmtest/cmd/vmrun -- /tmp/rec.test -test.v -test.run 'TestHostile|TestRefuse|TestHeal'

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// The hostile bed's cluster: node-a is the ktest node (198.51.100.1 on its
// LAN bridge), node-b a namespace on that LAN (198.51.100.2, ExternalIP
// 203.0.113.2, never reachable from the LAN: only its address matters).
const (
	hNodeA    = "node-a"
	hNodeB    = "node-b"
	hNodeBIP  = "198.51.100.2"
	hNodeBExt = "203.0.113.2"
	// hNodeB2 is node-b's second InternalIP, claimed by one hostile
	// Service as its ClusterIP: a ClusterIP is a VIP everywhere (no other
	// Service's endpoint or externalIP may use it), so the claim gets an
	// address of its own, not one the other rows need as node-b's.
	hNodeB2  = "198.51.100.3"
	hAPI     = "198.51.100.10"
	hGateway = "198.51.100.254"
	hClient  = "198.51.100.20"
	goodPod  = "10.244.1.10"
	evilPod  = "10.244.1.20"
	goodCIP  = "10.96.0.10"
	goodExt  = "192.0.2.10"
	goodPort = 80
)

// hbed is one node running the daemon's kernel path: ns is the node's
// namespace (node is set for the ktest node, which has the pods and the
// client).
type hbed struct {
	t      *testing.T
	ns     *ktest.NS
	node   *ktest.Node
	client *ktest.Client
	opts   planner.Options
	nodes  []*corev1.Node
	app    *applier.Applier
	logs   *observer.ObservedLogs
	mon    *ktest.AddrMonitor
	guard  *guard.Guard
}

func k8sNode(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func newHBed(t *testing.T, refuse bool) *hbed {
	t.Helper()
	b := &hbed{t: t, node: ktest.NewNode(t)}
	b.node.AddPod(t, "pod-good", goodPod)
	b.node.AddPod(t, "pod-evil", evilPod)
	b.client = b.node.AddClient(t, "client", hClient)
	b.ns = b.node.NS
	newHBedOpts(b, refuse)
	b.openKernel()
	return b
}

// newPeer runs the same kernel path in another node's namespace (node-b's,
// a namespace on node-a's LAN) with that node's identity.
func newPeer(t *testing.T, a *hbed, ns *ktest.NS, name string, addr netip.Prefix) *hbed {
	t.Helper()
	b := &hbed{t: t, ns: ns, nodes: a.nodes, opts: a.opts}
	b.opts.NodeName = name
	b.opts.LocalAddrs = []netip.Addr{addr.Addr()}
	b.opts.LocalPrefixes = []netip.Prefix{addr}
	b.openKernel()
	return b
}

// newHBedOpts sets the bed's nodes and planning options.
func newHBedOpts(b *hbed, refuse bool) {
	b.nodes = []*corev1.Node{
		k8sNode(hNodeA, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ktest.NodeIPv4.String()},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ktest.NodeIPv6.String()}),
		k8sNode(hNodeB, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: hNodeBIP},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: hNodeBExt},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: hNodeB2}),
	}
	pfx := netip.MustParsePrefix
	b.opts = planner.Options{
		NodeName:              hNodeA,
		LocalAddrs:            []netip.Addr{ktest.NodeIPv4, ktest.NodeIPv6, ktest.PodGatewayV4, ktest.PodGatewayV6},
		LocalPrefixes:         []netip.Prefix{pfx("198.51.100.1/24"), pfx("2001:db8:100::1/64")},
		Scheduler:             "rr",
		ClusterCIDRs:          []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/48")},
		ProtectedCIDRs:        []netip.Prefix{pfx("203.0.113.128/25")},
		APIServerAddrs:        []netip.Addr{netip.MustParseAddr(hAPI)},
		Gateways:              []netip.Addr{netip.MustParseAddr(hGateway)},
		RefuseNodeExternalIPs: refuse,
		MasqueradeBit:         planner.DefaultMasqueradeBit,
	}
}

// openKernel opens the daemon's kernel side in the node, as openKernel in
// internal/drive/daemon does: sysctls, IPVS, conntrack, kube-ipvs0, iptables.
func (b *hbed) openKernel() {
	t := b.t
	cluster := convert.Convert(nil, nil, b.nodes)
	b.guard = guard.New(planner.GuardInputs(&b.opts, cluster.Nodes))
	core, logs := observer.New(zap.DebugLevel)
	b.logs = logs
	log := zap.New(core)
	var (
		table *ipvskernel.Table
		ct    *ipvskernel.Conntrack
		nl    *netlink.Handle
		link  *addrkernel.Link
		rules *iptables.Syncer
	)
	err := b.ns.Do(func() error {
		rel, err := ipvskernel.Release()
		if err != nil {
			return err
		}
		if _, err := ipvskernel.WriteSysctls("/proc/sys", ipvs.KernelSysctls(rel, false)); err != nil {
			return err
		}
		if table, err = ipvskernel.Open(); err != nil {
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
		rules, err = iptableskernel.NewSyncer(log.Named("iptables"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rules.Close(); nl.Close(); ct.Close(); table.Close() })
	rec := ipvs.NewReconciler(table, ipvs.Options{Conntrack: ct, Log: log.Named("ipvs")})
	b.app = applier.New(rec, addrmgr.NewManager(link, b.guard, log.Named("addrmgr")), rules, log.Named("applier"))
	b.mon = b.ns.MonitorAddrs(t, link.Index())
}

// sync is one full sync of these objects, as `run` does at startup and at
// every --sync-period: Convert, Plan, Applier.Full.
func (b *hbed) sync(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice) *planner.State {
	b.t.Helper()
	cluster := convert.Convert(svcs, eps, b.nodes)
	st := planner.Plan(cluster, b.opts)
	start := time.Now()
	var res *applier.Result
	err := b.ns.Do(func() error {
		var err error
		res, err = b.app.Full(&st, b.opts.LocalAddrs)
		return err
	})
	if err != nil {
		b.t.Fatalf("full sync: %v", err)
	}
	if err := res.Err(); err != nil {
		b.t.Errorf("full sync failed services: %v", err)
	}
	b.t.Logf("full sync: %d services in, %d virtual servers, %d addresses, %d refusals, %d refused binds, %v",
		len(svcs), len(st.VirtualServers), len(st.Addresses), len(st.Refusals), len(res.Bind.Refused), time.Since(start).Round(time.Millisecond))
	return &st
}

// partial is the event-driven sync `run` does when these Services changed
// (deleted ones included): Convert, Plan, Applier.Partial.
func (b *hbed) partial(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, changed ...types.NamespacedName) {
	b.t.Helper()
	st := planner.Plan(convert.Convert(svcs, eps, b.nodes), b.opts)
	err := b.ns.Do(func() error {
		res, err := b.app.Partial(&st, changed...)
		if err == nil {
			err = res.Err()
		}
		return err
	})
	if err != nil {
		b.t.Fatalf("partial sync: %v", err)
	}
}

// bound is kube-ipvs0's addresses as `ip -o addr show dev kube-ipvs0` says.
func (b *hbed) bound() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for l := range strings.Lines(b.ns.Run(b.t, "ip", "-o", "addr", "show", "dev", addrmgr.Device)) {
		if f := strings.Fields(l); len(f) >= 4 {
			out[netip.MustParsePrefix(f[3]).Addr()] = true
		}
	}
	return out
}

// virtuals is the set of "ADDR:PORT" of `ipvsadm -S -n` (TCP, UDP, SCTP).
func (b *hbed) virtuals() map[string]bool {
	out := map[string]bool{}
	for l := range strings.Lines(b.ns.Run(b.t, "ipvsadm", "-S", "-n")) {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "-A" {
			out[f[2]] = true
		}
	}
	return out
}

// checkGood sends real TCP from the LAN client to the good service's
// ClusterIP and externalIP, and from the node to node-b.
func (b *hbed) checkGood(when string) {
	b.t.Helper()
	for _, vip := range []string{goodCIP, goodExt} {
		to := fmt.Sprintf("%s:%d", vip, goodPort)
		if got, err := b.client.Request(ktest.TCP, to); err != nil || !strings.HasPrefix(got, "pod-good ") {
			b.t.Errorf("%s: client -> good %s answered %q, %v", when, to, got, err)
		}
	}
}

// checkMonitor fails the test if any address the guard protects was ever
// added to kube-ipvs0, except those in handAdded.
func (b *hbed) checkMonitor(handAdded ...netip.Addr) {
	b.t.Helper()
	seen := b.mon.Stop()
	for _, p := range seen {
		if a := p.Addr(); b.guard.Check(a).Protected && !slices.Contains(handAdded, a) {
			b.t.Errorf("address monitor: protected %s appeared on kube-ipvs0", a)
		}
	}
	b.t.Logf("address monitor: %d additions on kube-ipvs0, none protected", len(seen))
}

// --- building API objects ---

type svcOpt func(*corev1.Service)

func service(ns, name, clusterIP string, opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports:      []corev1.ServicePort{{Name: "http", Port: goodPort, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func externalIPs(ips ...string) svcOpt {
	return func(s *corev1.Service) { s.Spec.ExternalIPs = ips }
}

func slice(svc *corev1.Service, addrs ...string) *discoveryv1.EndpointSlice {
	ready := true
	port, name, proto := int32(ktest.BackendPort), "http", corev1.ProtocolTCP
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		node := hNodeA
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return es
}

func goodObjects() ([]*corev1.Service, []*discoveryv1.EndpointSlice) {
	good := service("default", "good", goodCIP, externalIPs(goodExt))
	return []*corev1.Service{good}, []*discoveryv1.EndpointSlice{slice(good, goodPod)}
}

// hostileRow is one input of the table: a Service (and its slice) built
// around one hostile value, what the proxy must do with it, and the
// address (if any) that must never be bound.
type hostileRow struct {
	input string
	svc   *corev1.Service
	// eps overrides the slice's endpoints (default: pod-evil).
	eps []string
	// reason is the refusal reason code this row must produce; "" means
	// served without any refusal.
	reason model.Reason
	// served is "ADDR:PORT" that must have a virtual server after the sync.
	served string
	// never is an address that must not be on kube-ipvs0.
	never string
}

func hostileRows() []hostileRow {
	n := 0
	cip := func() string { n++; return fmt.Sprintf("10.96.1.%d", n) }
	ext := func(name, ip string, reason model.Reason) hostileRow {
		return hostileRow{input: "externalIP " + ip, svc: service("evil", name, cip(), externalIPs(ip)), reason: reason, never: ip}
	}
	port := func(p int32) svcOpt { return func(s *corev1.Service) { s.Spec.Ports[0].Port = p } }
	var rows []hostileRow
	rows = append(rows,
		ext("unspecified", "0.0.0.0", model.ReasonUnspecified),
		ext("loopback", "127.0.0.1", model.ReasonLoopback),
		ext("metadata", "169.254.169.254", model.ReasonLinkLocal),
		ext("multicast", "224.0.0.1", model.ReasonMulticast),
		ext("broadcast", "255.255.255.255", model.ReasonBroadcast),
		ext("subnet-broadcast", "198.51.100.255", model.ReasonBroadcast),
		ext("linklocal6", "fe80::1", model.ReasonLinkLocal),
		ext("loopback6", "::1", model.ReasonLoopback),
		ext("unspecified6", "::", model.ReasonUnspecified),
		ext("multicast6", "ff02::1", model.ReasonMulticast),
		ext("mapped", "::ffff:10.0.0.1", model.ReasonIPv4Mapped),
		ext("mapped-node", "::ffff:198.51.100.1", model.ReasonIPv4Mapped),
		ext("pod-ip", "10.244.5.5", model.ReasonPodCIDR),
		// Another row claims hAPI as its ClusterIP: an externalIP that is
		// another Service's ClusterIP is refused as a whole first.
		ext("apiserver", hAPI, model.ReasonAddressConflict),
		ext("gateway", hGateway, model.ReasonGateway),
		ext("other-node-external", hNodeBExt, model.ReasonNodeIP),
		ext("other-node-internal", hNodeBIP, model.ReasonNodeIP),
		ext("protected-cidr", "203.0.113.200", model.ReasonProtectedCIDR),
		ext("invalid-ip", "not-an-ip", model.ReasonInvalidAddress),
		ext("zoned-ip", "fe80::1%eth0", model.ReasonInvalidAddress),
		ext("cidr-not-ip", "192.0.2.60/32", model.ReasonInvalidAddress),
	)
	// This node's own address: refused for kube-ipvs0 (NodeIP), served at
	// L4 since the address is local anyway.
	self := ext("own-node-ip", ktest.NodeIPv4.String(), model.ReasonNodeIP)
	self.served = ktest.NodeIPv4.String() + ":80"
	rows = append(rows, self)
	rows = append(rows,
		hostileRow{input: "clusterIP = node-b's address", svc: service("evil", "clusterip-node", hNodeB2), reason: model.ReasonNodeIP, never: hNodeB2},
		hostileRow{input: "clusterIP = the API server", svc: service("evil", "clusterip-api", hAPI), reason: model.ReasonAPIServer, never: hAPI},
		// Served, with a warning: strict ARP is off, so every node answers
		// ARP for it on the node's LAN.
		hostileRow{input: "clusterIP 198.51.100.200 (node subnet, no node)", svc: service("evil", "clusterip-subnet", "198.51.100.200"),
			reason: model.ReasonOnLinkSubnet, served: "198.51.100.200:80"},
		hostileRow{input: "clusterIP 127.0.0.1", svc: service("evil", "clusterip-loopback", "127.0.0.1"), reason: model.ReasonLoopback, never: "127.0.0.1"},
		hostileRow{input: "externalIP = good's externalIP, same port", svc: service("evil", "conflict-ext", cip(), externalIPs(goodExt)), reason: model.ReasonDuplicateVirtual},
		// An externalIP that is another Service's ClusterIP: refused on every port (CVE-2020-8554).
		hostileRow{input: "externalIP = good's ClusterIP, same port", svc: service("evil", "conflict-cip", cip(), externalIPs(goodCIP)), reason: model.ReasonAddressConflict},
		hostileRow{input: "duplicate 192.0.2.50:80 (first by name)", svc: service("evil", "dup-a", cip(), externalIPs("192.0.2.50")), served: "192.0.2.50:80"},
		hostileRow{input: "duplicate 192.0.2.50:80 (second)", svc: service("evil", "dup-b", cip(), externalIPs("192.0.2.50")), reason: model.ReasonDuplicateVirtual},
		hostileRow{input: "port 0", svc: service("evil", "port-0", cip(), port(0)), reason: model.ReasonInvalidPort},
		hostileRow{input: "port 65535", svc: service("evil", "port-65535", "10.96.2.1", port(65535)), served: "10.96.2.1:65535"},
		hostileRow{input: "port -1", svc: service("evil", "port-neg", cip(), port(-1)), reason: model.ReasonInvalidPort},
		hostileRow{input: "port 70000", svc: service("evil", "port-huge", cip(), port(70000)), reason: model.ReasonInvalidPort},
		hostileRow{input: "protocol ICMP", svc: service("evil", "proto-icmp", cip(), func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }), reason: model.ReasonInvalidProtocol},
		hostileRow{input: "nodePort 70000", svc: service("evil", "nodeport-huge", cip(), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 70000
		}), reason: model.ReasonInvalidPort},
		hostileRow{input: "scheduler annotation \"bogus\"", svc: service("evil", "sched-bogus", cip(), func(s *corev1.Service) {
			s.Annotations = map[string]string{convert.AnnotationScheduler: "bogus"}
		}), reason: model.ReasonUnknownScheduler},
		hostileRow{input: "loadBalancerSourceRanges [not-a-cidr]", svc: service("evil", "lb-badrange", cip(), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{"not-a-cidr"}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.70"}}
		}), reason: model.ReasonInvalidSourceRange, served: "192.0.2.70:80"}, // served closed: every source dropped
		hostileRow{input: "LoadBalancer ingress = node-b's address", svc: service("evil", "lb-node", cip(), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: hNodeBIP}}
		}), reason: model.ReasonNodeIP, never: hNodeBIP},
		hostileRow{input: "endpoint 127.0.0.1", svc: service("evil", "ep-loopback", cip()), eps: []string{"127.0.0.1", evilPod}, reason: model.ReasonLoopback},
		hostileRow{input: "endpoint 169.254.169.254", svc: service("evil", "ep-metadata", cip()), eps: []string{"169.254.169.254", evilPod}, reason: model.ReasonLinkLocal},
		// A hostNetwork pod's endpoint is a node address: legitimate.
		hostileRow{input: "endpoint = node-b's address (hostNetwork)", svc: service("evil", "ep-node", "10.96.2.2"), eps: []string{hNodeBIP}, served: "10.96.2.2:80"},
	)
	// 1,000 externalIPs on one Service, one of them node-b's address.
	many := make([]string, 0, 1000)
	for i := range 999 {
		many = append(many, fmt.Sprintf("100.64.%d.%d", i/250, 1+i%250))
	}
	many = append(many, hNodeBIP)
	rows = append(rows, hostileRow{input: "1,000 externalIPs (999 + node-b)", svc: service("evil", "many", cip(), externalIPs(many...)),
		reason: model.ReasonNodeIP, served: "100.64.3.249:80", never: hNodeBIP})
	return rows
}

// outcome is what the plan and the kernel did with one row.
func (b *hbed) outcome(r *hostileRow, st *planner.State, bound map[netip.Addr]bool, vss map[string]bool) (outcome, reasons string, errs []string) {
	name := convert.ServiceName(r.svc)
	var got []string
	for _, rf := range st.Refusals {
		if rf.Subject == model.ServiceSubject(name) {
			got = append(got, string(rf.Reason))
		}
	}
	slices.Sort(got)
	got = slices.Compact(got)
	reasons = strings.Join(got, ",")
	servedVS := 0
	for _, vs := range st.VirtualServers {
		if vs.Service.NamespacedName == name {
			servedVS++
		}
	}
	switch {
	case len(got) == 0:
		outcome = "served"
	case reasons == string(model.ReasonOnLinkSubnet):
		outcome = "served, with a warning"
	case servedVS > 0:
		outcome = fmt.Sprintf("refused; rest of the service served (%d VS)", servedVS)
	default:
		outcome = "refused (service not proxied)"
	}
	if r.never != "" {
		if a, err := netip.ParseAddr(r.never); err == nil && vss[netip.AddrPortFrom(a, goodPort).String()] {
			outcome += "; served at L4, not bound"
		}
	}
	if r.reason == "" && len(got) > 0 {
		errs = append(errs, "refused, want served: "+reasons)
	}
	if r.reason != "" && !slices.Contains(got, string(r.reason)) {
		errs = append(errs, fmt.Sprintf("reasons %q, want %s", reasons, r.reason))
	}
	if r.served != "" && !vss[r.served] {
		errs = append(errs, "no virtual server "+r.served+" in the kernel")
	}
	if r.never != "" {
		if a, err := netip.ParseAddr(r.never); err == nil && bound[a.Unmap()] {
			errs = append(errs, r.never+" bound on kube-ipvs0")
		}
	}
	return outcome, reasons, errs
}

func TestHostileTable(t *testing.T) {
	b := newHBed(t, false)
	goodSvcs, goodSlices := goodObjects()
	b.sync(goodSvcs, goodSlices)
	b.checkGood("before")

	rows := hostileRows()
	svcs, slcs := slices.Clone(goodSvcs), slices.Clone(goodSlices)
	for i := range rows {
		r := &rows[i]
		eps := r.eps
		if eps == nil {
			eps = []string{evilPod}
		}
		svcs = append(svcs, r.svc)
		slcs = append(slcs, slice(r.svc, eps...))
	}
	st := b.sync(svcs, slcs)
	b.checkGood("with the hostile inputs")
	bound, vss := b.bound(), b.virtuals()
	t.Logf("kernel: %d addresses on kube-ipvs0, %d virtual servers", len(bound), len(vss))
	for a := range bound {
		if v := b.guard.Check(a); v.Protected {
			t.Errorf("protected %s bound on kube-ipvs0 (%s)", a, v.Reason)
		}
	}
	// The served rows answer real TCP (through pod-evil).
	for _, to := range []string{"192.0.2.50:80", "10.96.2.1:65535", "100.64.0.1:80", "100.64.3.249:80"} {
		if got, err := b.client.Request(ktest.TCP, to); err != nil || !strings.HasPrefix(got, "pod-evil ") {
			t.Errorf("client -> %s answered %q, %v", to, got, err)
		}
	}

	var tab bytes.Buffer
	w := tabwriter.NewWriter(&tab, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "#\tINPUT\tOUTCOME\tREASON\tCHECK")
	for i := range rows {
		r := &rows[i]
		outcome, reasons, errs := b.outcome(r, st, bound, vss)
		check := "ok"
		if len(errs) > 0 {
			check = "FAIL: " + strings.Join(errs, "; ")
			t.Errorf("row %d %s: %s", i+1, r.input, strings.Join(errs, "; "))
		}
		if reasons == "" {
			reasons = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", i+1, r.input, outcome, reasons, check)
	}
	w.Flush()
	t.Logf("hostile table (%d inputs; good service default/good answered on %s:80 and %s:80 before, during and after):\n%s",
		len(rows), goodCIP, goodExt, tab.String())
	if len(rows) < 30 {
		t.Errorf("only %d hostile inputs", len(rows))
	}

	// The hostile Services are deleted: the event-driven sync for them, then
	// a periodic full sync. Everything hostile is gone.
	var deleted []types.NamespacedName
	for i := range rows {
		deleted = append(deleted, convert.ServiceName(rows[i].svc))
	}
	b.partial(goodSvcs, goodSlices, deleted...)
	b.sync(goodSvcs, goodSlices)
	b.checkGood("after")
	if got := b.bound(); len(got) != 2 || !got[netip.MustParseAddr(goodCIP)] || !got[netip.MustParseAddr(goodExt)] {
		t.Errorf("kube-ipvs0 after removing the hostile services: %v", got)
	}
	if got := b.virtuals(); len(got) != 2 {
		t.Errorf("virtual servers after removing the hostile services: %v", got)
	}
	b.checkMonitor()
}
