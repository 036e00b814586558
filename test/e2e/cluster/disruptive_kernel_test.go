//go:build kernel

package cluster_test

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// disruptiveTests are the [Disruptive] tests that hit the proxies
// themselves: their iptables chains deleted (SN-113, networking.go), every
// proxy restarted (SN-114, service.go). They run last: a proxy they leave
// broken would fail every test after them.
func (b *bed) disruptiveTests(t *testing.T) {
	t.Run("should recreate its iptables rules if they are deleted", b.recreateIptables)
	t.Run("should work after restarting kube-proxy", b.restartProxies)
}

// iptablesTables are the tables upstream's test empties of KUBE-* chains.
var iptablesTables = []string{"nat", "filter", "mangle"}

// kubeChainRef is a rule's jump or goto to a KUBE-* chain.
var kubeChainRef = regexp.MustCompile(`\s-[jg] KUBE-`)

// recreateIptables is SN-113: a serve-hostname Service (3 pods, one per
// node; NodePort, beyond upstream's ClusterIP, for the runner's leg) is
// up; on node-a every jump to a KUBE-* chain is deleted and every KUBE-*
// chain flushed and deleted, in nat, filter and mangle (one
// iptables-restore per table: the table as it was, less those). Then,
// within 5 min, node-a's nat and filter tables are back as they were
// (iptables-save, counters aside) and the Service is up (H7) from a pod
// on node-a, from node-a itself, and from the runner through node-a's
// NodePort (answered by the pods on other nodes only through the
// masquerade rules the deletion took). Upstream's second half, kubelet's
// KUBE-IPTABLES-HINT back in mangle, is kubelet's and not checked.
func (b *bed) recreateIptables(t *testing.T) {
	ns := b.testNamespace(t, "recreate-iptables")
	svc, names := b.serveHostnameService(t, ns, "service-up", 3)
	svc = b.updateService(t, ns, svc.Name, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
	nodeA := b.node(t, "node-a")
	exec := b.execPod(t, ns, "node-a")
	np := nodePort(nodeA, svc.Spec.Ports[0].NodePort)
	up := func(stage string) {
		t.Helper()
		reachesAll(t, stage+": pod on node-a", exec.ns, vip(svc, 80), names)
		reachesAll(t, stage+": node-a", nodeA.ns.NS, vip(svc, 80), names)
		reachesAll(t, stage+": runner", b.runner, np, names)
	}
	up("before")
	want := iptablesState(t, nodeA.ns.NS, "nat", "filter")
	if !strings.Contains(want, ":KUBE-SERVICES") {
		t.Fatalf("node-a has no KUBE-SERVICES chain before the deletion:\n%s", want)
	}
	for _, table := range iptablesTables {
		deleteKubeChains(t, nodeA.ns.NS, table)
	}
	eventually(t, "node-a's nat and filter tables back", 5*time.Minute, func() error {
		if got := iptablesState(t, nodeA.ns.NS, "nat", "filter"); got != want {
			return fmt.Errorf("now:\n%s\nwant:\n%s", got, want)
		}
		return nil
	})
	up("after")
}

// iptablesState is `iptables-save -t TABLE` of each table without the
// comments and the chains' counters, each chain's rules in their order
// under its declaration and the chains sorted by name (the order
// iptables-save lists chains in is the order they were created in, with
// the nft backend).
func iptablesState(t *testing.T, ns *ktest.NS, tables ...string) string {
	t.Helper()
	var out []string
	for _, table := range tables {
		rules := map[string][]string{}
		for _, l := range strings.Split(ns.Run(t, "iptables-save", "-t", table), "\n") {
			switch {
			case strings.HasPrefix(l, ":"):
				chain, _, _ := strings.Cut(l[1:], " ")
				rules[chain] = append([]string{l[:strings.Index(l+" [", " [")]}, rules[chain]...)
			case strings.HasPrefix(l, "-A "):
				chain, _, _ := strings.Cut(l[3:], " ")
				rules[chain] = append(rules[chain], l)
			}
		}
		out = append(out, "*"+table)
		for _, chain := range slices.Sorted(maps.Keys(rules)) {
			out = append(out, rules[chain]...)
		}
	}
	return strings.Join(out, "\n")
}

// deleteKubeChains empties table of its KUBE-* chains and of the rules
// jumping to them, in one `iptables-restore` (which flushes the table and
// deletes its chains before writing what it is given), and checks with an
// `iptables-save` run right after it, in the same shell, that none is
// left (a later check could see the proxy's repair: its full sync reads
// and rewrites one table after the other, seconds apart under TCG).
func deleteKubeChains(t *testing.T, ns *ktest.NS, table string) {
	t.Helper()
	var in []string
	for _, l := range strings.Split(ns.Run(t, "iptables-save", "-t", table), "\n") {
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, ":KUBE-"), strings.HasPrefix(l, "-A KUBE-"), kubeChainRef.MatchString(l):
		default:
			in = append(in, l)
		}
	}
	after, err := ns.ExecInput(strings.Join(in, "\n")+"\n", "sh", "-c", "iptables-restore && iptables-save -t "+table)
	if err != nil {
		t.Fatalf("delete the KUBE-* chains of %s: %v", table, err)
	}
	if strings.Contains(after, "KUBE-") {
		t.Fatalf("KUBE-* chains left in %s after the deletion:\n%s", table, after)
	}
}

// restartProxies is SN-114: two serve-hostname Services (3 pods each) up
// (H7, from a pod on node-c and from node-a); every node's proxy killed
// (its pod deleted with a zero grace period) and started again with its
// state directory, all at once; each syncs again, and both Services are
// up. Beyond upstream, a pod on node-c asks service1's VIP every 200 ms
// from before the kill until every new proxy has synced: a restart adopts
// the kernel state it finds, so not one request may fail.
func (b *bed) restartProxies(t *testing.T) {
	ns := b.testNamespace(t, "restart-proxy")
	svc1, names1 := b.serveHostnameService(t, ns, "service1", 3)
	svc2, names2 := b.serveHostnameService(t, ns, "service2", 3)
	exec := b.execPod(t, ns, "node-c")
	host := b.node(t, "node-a").ns.NS
	up := func(stage string) {
		t.Helper()
		for _, s := range []struct {
			svc   *corev1.Service
			names []string
		}{{svc1, names1}, {svc2, names2}} {
			reachesAll(t, stage+": pod on node-c", exec.ns, vip(s.svc, 80), s.names)
			reachesAll(t, stage+": node-a", host, vip(s.svc, 80), s.names)
		}
	}
	up("before the restart")

	traffic := startHTTPLoop(exec.ns, vip(svc1, 80), 200*time.Millisecond)
	start := time.Now()
	for _, n := range b.nodes {
		b.restartProxy(t, n)
	}
	for _, n := range b.nodes {
		n.proxy.waitSynced(t, 3*time.Minute)
	}
	t.Logf("the three proxies killed, started again and synced in %v", time.Since(start).Round(time.Millisecond))
	ok, failed, first := traffic.stop()
	t.Logf("execpod -> %s during the restart: %d answered, %d failed", vip(svc1, 80), ok, failed)
	if failed > 0 || ok == 0 {
		t.Errorf("execpod -> %s during the restart: %d of %d requests failed, the first: %v", vip(svc1, 80), failed, ok+failed, first)
	}
	up("after the restart")
}

// httpLoop asks a target /hostname from a namespace at a fixed period
// and counts the answers and the failures.
type httpLoop struct {
	mu         sync.Mutex
	ok, failed int
	first      error
	quit, done chan struct{}
}

func startHTTPLoop(from *ktest.NS, target netip.AddrPort, period time.Duration) *httpLoop {
	l := &httpLoop{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			_, err := hostnameOverHTTP(from, target, 5*time.Second)
			l.mu.Lock()
			if err != nil {
				l.failed++
				if l.first == nil {
					l.first = fmt.Errorf("at %s: %w", time.Now().Format("15:04:05.000"), err)
				}
			} else {
				l.ok++
			}
			l.mu.Unlock()
			select {
			case <-l.quit:
				return
			case <-time.After(period):
			}
		}
	}()
	return l
}

// stop ends the loop: how many requests were answered, how many failed,
// and the first failure.
func (l *httpLoop) stop() (ok, failed int, first error) {
	close(l.quit)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.failed, l.first
}
