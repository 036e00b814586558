//go:build kernel

package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest/kstate"
)

// turnKernelServices are the services of the kernel turn test: with one in
// scaleNodePortEvery a NodePort too, 1,375 virtual servers, three batches
// of the IPVS walk (512, 512, 351), 11,000 real servers and 1,100
// addresses on kube-ipvs0: a first sync of a few seconds under TCG.
const turnKernelServices = 1100

// TestKernelChangeTakesATurnInAPeriodicFullSync is
// TestChangeTakesATurnInAPeriodicFullSync against the real kernel of a
// node namespace, its layers opened as run opens them (openKernel: IPVS
// over netlink with a second socket for the read, the address manager on
// kube-ipvs0 with its watch, the ipset and iptables syncers): changes
// that arrive inside a periodic full sync's IPVS walk, once it took its
// changes and its read beside the loop was done, are applied in a turn
// (a partial sync, reported before the full sync, which counts one turn),
// and the full sync goes on with the state they leave. The node ends as a
// fresh sync of the same services programs a second fresh node — the same
// `ipvsadm -S -n` (but for the replaced endpoint, quiesced at weight 0),
// the same addresses on kube-ipvs0, the same `ipset save` members —: a
// service changed late in the walk is not set back, one added early is not
// deleted, one removed is not created again.
func TestKernelChangeTakesATurnInAPeriodicFullSync(t *testing.T) {
	began := time.Now()
	node := ktest.NewNode(t)
	l, src, reps := newKernelTurnBed(t, node, turnKernelServices)
	t.Logf("first full sync of %d services: %v", turnKernelServices, time.Since(began).Round(time.Millisecond))

	late := svcKey(1050) // its ClusterIP is in the walk's last batch
	gone, early := svcKey(3), types.NamespacedName{Namespace: "ns", Name: "early"}
	lateVIP, goneVIP := src.svcs[late].ClusterIPs[0], src.svcs[gone].ClusterIPs[0]
	var replaced netip.Addr
	arrived := false
	arriveInTheWalk(src, func() {
		replaced, arrived = changeInTheWalk(src, late, gone, early), true
	})
	fullStart := time.Now()
	inNode(t, node, func() error {
		// As readBeside, in the node: the read, then the full sync from it.
		if err := beginFullFromRead(l); err != nil {
			return err
		}
		l.syncOnce()
		return nil
	})
	t.Logf("periodic full sync from its read, with its turn: %v", time.Since(fullStart).Round(time.Millisecond))

	if !arrived {
		t.Fatal("the change never arrived: the full sync asked fewer than four times whether changes wait")
	}
	checkOneTurn(t, l, src, *reps, []types.NamespacedName{early, gone, late})

	// A fresh sync of the same services, in a fresh node.
	freshNode := ktest.NewNode(t)
	freshStart := time.Now()
	fl, _, flast := newKernelLoop(t, freshNode, 1)
	fl.Source = src
	fl.needFull = true
	inNode(t, freshNode, func() error { fl.syncOnce(); return flast.Err })
	t.Logf("fresh full sync: %v", time.Since(freshStart).Round(time.Millisecond))

	ipvsText := kstate.IPVSText(t, node.NS)
	// The replaced endpoint is quiesced (weight 0) until its connections
	// end, as any removed one; a fresh sync never had it.
	quiesced := fmt.Sprintf("-a -t %s -r %s:8080 -m -w 0", netip.AddrPortFrom(lateVIP, 80), replaced)
	got := strings.Join(slices.DeleteFunc(strings.Split(ipvsText, "\n"), func(l string) bool { return l == quiesced }), "\n")
	if want := kstate.IPVSText(t, freshNode.NS); got != want {
		t.Errorf("IPVS (ipvsadm -S -n) after the full sync in turns differs from a fresh sync's:\n%s", lineDiff(got, want))
	}
	for _, c := range []struct {
		what string
		read func(*ktest.NS) string
	}{
		{"kube-ipvs0's addresses", func(ns *ktest.NS) string { return kstate.AddressesText(t, ns, addrmgr.Device) }},
		{"the ipsets' members (ipset save)", func(ns *ktest.NS) string { return kstate.IPSetText(t, ns) }},
	} {
		if got, want := c.read(node.NS), c.read(freshNode.NS); got != want {
			t.Errorf("%s after the full sync in turns differ from a fresh sync's:\n%s", c.what, lineDiff(got, want))
		}
	}
	newRS := fmt.Sprintf("-a -t %s -r 10.250.0.1:8080 -m -w 1", netip.AddrPortFrom(lateVIP, 80))
	if !slices.Contains(strings.Split(ipvsText, "\n"), newRS) {
		t.Errorf("IPVS lacks %q: the endpoint that replaced %s in %s was set back by the full sync's walk", newRS, replaced, late)
	}
	goneVS := fmt.Sprintf("-A -t %s ", netip.AddrPortFrom(goneVIP, 80))
	if strings.Contains(ipvsText, goneVS) {
		t.Errorf("IPVS still holds the virtual server of %s, removed in the turn (%q)", gone, goneVS)
	}
	t.Logf("in all: %v", time.Since(began).Round(time.Millisecond))
}

// newKernelTurnBed is newTurnBed in a node namespace's kernel: a loop over
// the daemon's kernel side (newKernelLoop) with n services after its first
// full sync, and the reports of its syncs from then on.
func newKernelTurnBed(t *testing.T, node *ktest.Node, n int) (*Loop, *fakeSource, *[]SyncReport) {
	t.Helper()
	l, src, last := newKernelLoop(t, node, n)
	l.needFull = true
	inNode(t, node, func() error {
		if l.syncOnce(); last.Err != nil {
			return fmt.Errorf("the first full sync: %w", last.Err)
		}
		return nil
	})
	reps := new([]SyncReport)
	l.Observe = func(rep SyncReport, _ Stats) { *reps = append(*reps, rep) }
	return l, src, reps
}

// newKernelLoop is newScaleLoopOver (n services × 10 endpoints) over the
// kernel side of node opened as run opens it (openKernel, with
// config.Default and the ownership journal in a directory of the test),
// the address manager's guard the planner's, as run sets it (OnPlan).
// Its syncs must run in the node (inNode): the iptables syncer's commands
// run in the namespace of the thread that starts them.
func newKernelLoop(t *testing.T, node *ktest.Node, n int) (*Loop, *fakeSource, *SyncReport) {
	t.Helper()
	c := config.Default()
	c.StateDir = t.TempDir()
	var k *kernel
	inNode(t, node, func() (err error) {
		k, err = openKernel(c, zap.NewNop())
		return err
	})
	t.Cleanup(k.close)
	l, src, last := newScaleLoopOver(t, n, k)
	l.OnPlan = func(g *guard.Guard, _ *planner.State) { k.guard.Set(g) }
	return l, src, last
}

// inNode runs f on a thread in node's network namespace, as the daemon
// runs in its own, and fails the test with its error.
func inNode(t *testing.T, node *ktest.Node, f func() error) {
	t.Helper()
	if err := node.Do(f); err != nil {
		t.Fatalf("in %s: %v", node.Name, err)
	}
}
