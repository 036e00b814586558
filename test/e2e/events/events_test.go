package events_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

// nodes is how many proxies report.
const nodes = 200

// Election timings of the test: short, so that a failover takes seconds.
var election = events.Election{LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}

func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

func nodeAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 20, byte(i / 250), byte(i%250 + 1)})
}

// extraLocal is an address on an interface of node-003 only, in no Node's
// status: a refusal only node-003 makes (LocalAddress, node-scoped).
var extraLocal = netip.MustParseAddr("192.0.2.33")

const (
	apiServerAddr = "10.30.0.1"
	node1External = "203.0.113.1"
)

// hostileService is one Service the API server accepts and every node
// refuses parts of: two other nodes' addresses, two pod addresses, two
// protected addresses, the API server, node-003's own extra address, only
// an IPv6 source range for its IPv4 LoadBalancer IP, and 10 ports × 159
// external addresses, over the cap of 1,000 virtual servers.
func hostileService() *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "hostile"},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeLoadBalancer,
			LoadBalancerSourceRanges: []string{"2001:db8::/32"},
			ExternalIPs: []string{nodeAddr(0).String(), node1External, "10.244.1.7", "10.244.2.7", "172.16.0.5", "172.16.0.6",
				apiServerAddr, extraLocal.String()},
		},
	}
	for i := range 10 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(8000 + i), Protocol: corev1.ProtocolTCP})
	}
	for i := len(svc.Spec.ExternalIPs); i < 158; i++ {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, fmt.Sprintf("198.18.0.%d", i))
	}
	return svc
}

// options are the planning options of node i.
func options(i int) planner.Options {
	o := planner.Options{
		NodeName:                    nodeName(i),
		LocalAddrs:                  []netip.Addr{nodeAddr(i)},
		Scheduler:                   "rr",
		MasqueradeBit:               planner.DefaultMasqueradeBit,
		ClusterCIDRs:                []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ProtectedCIDRs:              []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")},
		APIServerAddrs:              []netip.Addr{netip.MustParseAddr(apiServerAddr)},
		MaxVirtualServersPerService: convert.DefaultMaxVirtualServers,
	}
	if i == 3 {
		o.LocalAddrs = append(o.LocalAddrs, extraLocal)
	}
	return o
}

// reporter is one node's proxy: its Event recorder, its Refusals and its
// candidacy for the events Lease.
type reporter struct {
	name     string
	r        *events.Refusals
	refusals []model.Refusal
	stop     context.CancelFunc
	done     chan struct{}
}

// TestEventsScaleWithTheCluster runs 200 proxy reporters against the real
// API server for one hostile Service. The refusals every node makes alike
// are written once, by the holder of the events Lease; node-003's own
// refusal by node-003. When the holder dies (its Lease not released),
// another node takes the Lease within its duration and writes them once
// more. Without the election every node wrote all of them: 200 × the
// refusals.
func TestEventsScaleWithTheCluster(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	for _, ns := range []string{"evil", "ipvs-proxy"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	svc, err := admin.CoreV1().Services("evil").Create(ctx, hostileService(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refused the hostile Service: %v", err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.50"}}
	if svc, err = admin.CoreV1().Services("evil").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Every node plans the Service as `run` does.
	cluster := convert.Convert([]*corev1.Service{svc}, nil, nil)
	for i := range nodes {
		cluster.Nodes = append(cluster.Nodes, model.Node{Name: nodeName(i), Addresses: []netip.Addr{nodeAddr(i)}})
	}
	cluster.Nodes[1].Addresses = append(cluster.Nodes[1].Addresses, netip.MustParseAddr(node1External))
	clusterScoped := map[string]bool{} // "reason field address", as any node refuses it
	var nodeScoped int
	rs := make([]*reporter, nodes)
	for i := range rs {
		st := planner.Plan(cluster, options(i))
		rs[i] = &reporter{name: nodeName(i), refusals: st.Refusals}
		for _, r := range st.Refusals {
			if r.Reason.Scope() == model.ScopeCluster {
				clusterScoped[fmt.Sprintf("%s %s %s", r.Reason, r.Field, r.Address)] = true
			} else {
				nodeScoped++
			}
		}
	}
	t.Logf("each node refuses %d to %d things; %d cluster-scoped refusals, %d node-scoped refusals in all",
		len(rs[0].refusals), len(rs[3].refusals), len(clusterScoped), nodeScoped)
	if len(clusterScoped) < 8 || nodeScoped != 1 {
		t.Fatalf("the hostile Service gives %d cluster-scoped and %d node-scoped refusals, want at least 8 and exactly 1", len(clusterScoped), nodeScoped)
	}

	// 200 reporters: each its own recorder and candidacy, each reporting
	// its refusals at every "sync" (every second).
	client := kubernetes.NewForConfigOrDie(srv.Config())
	var wg sync.WaitGroup
	for _, rep := range rs {
		sink, stopSink := events.NewBroadcaster(client, rep.name)
		rep.r = events.New(sink, func(string, string, string) string { return string(svc.UID) }, events.Options{QPS: 5, Burst: 100, Elected: true})
		rctx, stop := context.WithCancel(ctx)
		rep.stop, rep.done = stop, make(chan struct{})
		el := election
		el.Client, el.Namespace, el.Identity, el.KeepOnStop = client, "ipvs-proxy", rep.name, true
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = rep.r.Elect(rctx, el, zap.NewNop())
		}()
		go func() {
			defer wg.Done()
			defer close(rep.done)
			defer stopSink()
			for {
				rep.r.Report(rep.refusals)
				select {
				case <-rctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}()
	}
	defer func() {
		for _, rep := range rs {
			rep.stop()
		}
		wg.Wait()
	}()

	want := len(clusterScoped) + nodeScoped
	evs := settle(ctx, t, admin, "evil", svc.UID, want)
	t.Logf("%d reporters, %d Events on %s/%s (without the election: %d)", nodes, len(evs), svc.Namespace, svc.Name, nodes*len(clusterScoped)+nodeScoped)
	leader := checkEvents(t, evs, len(clusterScoped), nodeScoped)

	// The holder dies: it stops renewing and reporting, its Lease stays
	// until it expires.
	var dead *reporter
	for _, rep := range rs {
		if rep.name == leader {
			dead = rep
		}
	}
	died := time.Now()
	dead.stop()
	<-dead.done
	var next string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*election.LeaseDuration, true, func(context.Context) (bool, error) {
		for _, rep := range rs {
			if rep != dead && rep.r.Leading() {
				next = rep.name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no reporter took over from %s within %v", leader, 3*election.LeaseDuration)
	}
	t.Logf("%s died holding the Lease; %s took over after %v (Lease duration %v, retry period %v)",
		leader, next, time.Since(died).Round(100*time.Millisecond), election.LeaseDuration, election.RetryPeriod)
	evs = settle(ctx, t, admin, "evil", svc.UID, want+len(clusterScoped))
	bySource := map[string]int{}
	for _, e := range evs {
		bySource[e.Source.Host]++
	}
	fromNext := len(clusterScoped)
	if next == nodeName(3) {
		fromNext += nodeScoped
	}
	if len(evs) != want+len(clusterScoped) || bySource[next] != fromNext {
		t.Errorf("after the failover %d Events (%v by source), want %d: the new reporter %s writes the %d cluster-scoped ones again",
			len(evs), bySource, want+len(clusterScoped), next, len(clusterScoped))
	}
}

// settle waits until at least want Events of namespace ns are on the
// object uid and their number has not changed for 5 s, and returns them.
func settle(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string, uid types.UID, want int) []corev1.Event {
	t.Helper()
	var evs []corev1.Event
	last, since := -1, time.Now()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(uid)).String()})
		if err != nil {
			return false, err
		}
		evs = list.Items
		if len(evs) != last {
			last, since = len(evs), time.Now()
		}
		return len(evs) >= want && time.Since(since) > 5*time.Second, nil
	})
	if err != nil {
		t.Fatalf("Events did not settle at %d or more: %d (%v)", want, len(evs), err)
	}
	return evs
}

// checkEvents: one Event per cluster-scoped refusal, all from one source
// (the Lease holder), plus the node-scoped ones from node-003. It returns
// the holder.
func checkEvents(t *testing.T, evs []corev1.Event, cluster, node int) string {
	t.Helper()
	bySource := map[string][]string{}
	for _, e := range evs {
		bySource[e.Source.Host] = append(bySource[e.Source.Host], e.Reason)
	}
	var leader string
	for host, reasons := range bySource {
		sort.Strings(reasons)
		t.Logf("from %s: %s", host, strings.Join(reasons, " "))
		if host != nodeName(3) || len(bySource) == 1 {
			leader = host
		}
	}
	local := slices.Index(bySource[nodeName(3)], string(model.ReasonLocalAddress)) >= 0
	switch {
	case len(evs) != cluster+node:
		t.Errorf("%d Events, want %d: %d cluster-scoped once, %d node-scoped", len(evs), cluster+node, cluster, node)
	case len(bySource) > 2:
		t.Errorf("Events from %d nodes, want the Lease holder and node-003 only", len(bySource))
	case !local:
		t.Errorf("node-003 did not report its own LocalAddress refusal")
	}
	return leader
}
