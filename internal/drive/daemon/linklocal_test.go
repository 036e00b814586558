package daemon

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
)

// ownerApplier records the plan and the node addresses of the last full
// sync (those the ownership rule calls the node's).
type ownerApplier struct {
	st        *planner.State
	nodeAddrs []netip.Addr
}

func (a *ownerApplier) Full(st *planner.State, nodeAddrs []netip.Addr) (*applier.Result, error) {
	a.st, a.nodeAddrs = st, nodeAddrs
	return &applier.Result{}, nil
}

func (a *ownerApplier) Partial(st *planner.State, _ applier.Index, _ ...types.NamespacedName) (*applier.Result, error) {
	a.st = st
	return &applier.Result{}, nil
}

// TestLinkLocalNodePorts: a link-local node address (169.254.1.1 on every
// pod veth, fe80::) gets no NodePort unless --nodeport-addresses names a
// CIDR containing it, and is the node's for the ownership rule either way,
// so that the NodePort virtual servers kube-proxy left there are removed
// at a takeover (issue 13).
func TestLinkLocalNodePorts(t *testing.T) {
	a := netip.MustParseAddr
	nodeIP, v4LL, v6LL := a("198.51.100.1"), a("169.254.1.1"), a("fe80::1")
	env := nodeenv.Env{LocalAddrs: []netip.Addr{nodeIP}, LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.1/24")},
		LinkLocalAddrs: []netip.Addr{v4LL, v6LL}}
	for _, tc := range []struct {
		name    string
		cidrs   []netip.Prefix
		planned []netip.Addr
	}{
		{"default", nil, []netip.Addr{nodeIP}},
		{"nodeport-addresses naming 169.254.0.0/16", []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("169.254.0.0/16")},
			[]netip.Addr{v4LL, nodeIP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeSource()
			src.svcs[key("ns/np")] = model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "np"}, Port: "http"},
				Protocol: model.TCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{a("10.96.0.80")}}
			app := &ownerApplier{}
			opts := testOpts
			opts.NodePortAddresses = tc.cidrs
			l := &Loop{Source: src, Applier: app, Options: opts, Env: func(bool) (nodeenv.Env, error) { return env, nil }}
			l.defaults()
			l.needFull = true
			l.syncOnce()
			if app.st == nil {
				t.Fatal("no full sync")
			}
			var got []netip.Addr
			for _, vs := range app.st.VirtualServers {
				if vs.Port == 30080 {
					got = append(got, vs.Address)
				}
			}
			slices.SortFunc(got, netip.Addr.Compare)
			if !slices.Equal(got, tc.planned) {
				t.Errorf("NodePort virtual servers on %v, want %v", got, tc.planned)
			}
			for _, want := range []netip.Addr{nodeIP, v4LL, v6LL} {
				if !slices.Contains(app.nodeAddrs, want) {
					t.Errorf("full sync's node addresses %v lack %v: kube-proxy's NodePorts there would never be removed", app.nodeAddrs, want)
				}
			}
		})
	}
}
