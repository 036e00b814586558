//go:build kernel

package recovery

// `run` heals at startup and at every --sync-period: a full sync
// (applier.Full through the daemon's kernel path, see
// hostile_kernel_test.go) strips a protected address an older proxy bound
// by hand on kube-ipvs0 — another node's address — together with the
// virtual server on it, logs the removal with its reason, and node-a can
// reach node-b again.

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

func TestHealFullSync(t *testing.T) {
	a := newHBed(t, false)
	nb := a.node.AddClient(t, hNodeB, hNodeBIP)
	listen(t, nb.NS, "node-b", 6443)
	goodSvcs, goodSlices := goodObjects()
	a.sync(goodSvcs, goodSlices)
	if got := a.ns.MustRequest(t, ktest.TCP, hNodeBIP+":6443"); !strings.HasPrefix(got, "node-b ") {
		t.Fatalf("before: node-a -> node-b:6443 answered %q", got)
	}

	// The disaster, as an older proxy leaves it: node-b's address on
	// node-a's kube-ipvs0 with a virtual server on it.
	a.ns.RunInput(t, fmt.Sprintf("addr add %s/32 dev kube-ipvs0\n", hNodeBIP), "ip", "-batch", "-")
	a.ns.RunInput(t, fmt.Sprintf("-A -t %[1]s:6443 -s rr\n-a -t %[1]s:6443 -r %[2]s:8080 -m -w 1\n", hNodeBIP, goodPod), "ipvsadm", "-R")
	if got, err := a.ns.Request(ktest.TCP, hNodeBIP+":6443"); err == nil && strings.HasPrefix(got, "node-b ") {
		t.Fatalf("disaster not reproduced: node-a -> node-b:6443 answered %q", got)
	} else {
		t.Logf("with node-b's address on kube-ipvs0: node-a -> node-b:6443 answered %q, %v", strings.TrimSpace(got), err)
	}

	// The periodic full sync, same Services.
	a.logs.TakeAll()
	a.sync(goodSvcs, goodSlices)
	if a.bound()[netip.MustParseAddr(hNodeBIP)] {
		t.Errorf("full sync left %s on kube-ipvs0", hNodeBIP)
	}
	if vss := a.virtuals(); vss[hNodeBIP+":6443"] {
		t.Errorf("full sync left the virtual server %s:6443", hNodeBIP)
	}
	if got, err := a.ns.Request(ktest.TCP, hNodeBIP+":6443"); err != nil || !strings.HasPrefix(got, "node-b ") {
		t.Errorf("after the full sync: node-a -> node-b:6443 answered %q, %v", got, err)
	}
	a.checkGood("after healing")

	// The removal is logged with its reason: addrmgr logs the address with
	// its reason code. ipvs.Reconciler does not log virtual servers one by
	// one: its "ipvs sync" debug line counts servicesDeleted.
	var unbound, deleted bool
	for _, e := range a.logs.All() {
		line := fmt.Sprintf("%s %s %v", e.LoggerName, e.Message, e.ContextMap())
		if strings.Contains(line, hNodeBIP) {
			t.Logf("log: %s", line)
		}
		m := e.ContextMap()
		if e.Message == "unbound address" && fmt.Sprint(m["address"]) == hNodeBIP+"/32" {
			unbound = true
			if why := fmt.Sprint(m["why"]); !strings.HasPrefix(why, "NodeIP: ") {
				t.Errorf("unbound %s with why %q, want the NodeIP reason", hNodeBIP, why)
			}
		}
		if e.LoggerName == "ipvs" && e.Message == "ipvs sync" && fmt.Sprint(m["servicesDeleted"]) == "1" {
			deleted = true
			t.Logf("log: %s", line)
		}
	}
	if !unbound {
		t.Errorf("no \"unbound address\" log for %s", hNodeBIP)
	}
	if !deleted {
		t.Errorf("no ipvs sync log with servicesDeleted=1 (the virtual server %s:6443)", hNodeBIP)
	}
	a.checkMonitor(netip.MustParseAddr(hNodeBIP))
}
