package daemon

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/iptablestest"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// TestPartialSyncHandsAVirtualServerOver: ns/a and ns/b share an
// externalIP and port; ns/a wins the virtual server and ns/b's claim is
// refused as a duplicate. When ns/a lets it go, the partial sync of ns/a
// alone hands it to ns/b (planner.Incremental.TakeHandedOver): the virtual
// server stays, with ns/b's endpoint, rather than being deleted as ns/a's
// until the next full sync.
func TestPartialSyncHandsAVirtualServerOver(t *testing.T) {
	node := scaleNode{ipvstest.NewFakeTable(), addrmgrtest.NewFakeLink(), iptablestest.NewFakeSets()}
	l, src, last := newScaleLoopOn(t, 4, node)
	ext := netip.MustParseAddr("203.0.113.7")
	put := func(name, clusterIP, endpoint string, externalIPs ...netip.Addr) {
		k := types.NamespacedName{Namespace: "ns", Name: name}
		src.svcs[k] = model.ServicePort{Name: model.ServicePortName{NamespacedName: k, Port: "http"}, Protocol: model.TCP, Port: 80,
			ClusterIPs: []netip.Addr{netip.MustParseAddr(clusterIP)}, ExternalIPs: externalIPs}
		src.eps[k] = []model.Endpoint{{Address: netip.MustParseAddr(endpoint), Port: 8080, Ready: true, Serving: true}}
		src.dirty[k] = true
	}
	put("a", "10.96.200.1", "10.250.0.1", ext)
	put("b", "10.96.200.2", "10.250.0.2", ext)
	l.needFull = true
	l.syncOnce()
	if got := linesOf(node.table.String(), "203.0.113.7:80"); !slices.Contains(got, "-a -t 203.0.113.7:80 -r 10.250.0.1:8080 -m -w 1") {
		t.Fatalf("setup: the externalIP's virtual server should be ns/a's: %q", got)
	}

	put("a", "10.96.200.1", "10.250.0.1")
	l.syncOnce()
	if last.Full || last.Err != nil {
		t.Fatalf("the change: full %t, error %v; want a partial sync", last.Full, last.Err)
	}
	got := linesOf(node.table.String(), "203.0.113.7:80")
	if !slices.Contains(got, "-A -t 203.0.113.7:80 -s rr") || !slices.Contains(got, "-a -t 203.0.113.7:80 -r 10.250.0.2:8080 -m -w 1") {
		t.Errorf("after ns/a let the externalIP go, its virtual server is not ns/b's: %q", got)
	}
}

// linesOf are the lines of s that contain sub.
func linesOf(s, sub string) []string {
	return slices.DeleteFunc(strings.Split(s, "\n"), func(l string) bool { return !strings.Contains(l, sub) })
}
