package daemon

import (
	"maps"
	"net/netip"
	"slices"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
)

// nodeInputs are the Nodes a full sync read from the Source, and what was
// refused of them.
type nodeInputs struct {
	nodes    []model.Node
	refusals []model.Refusal
}

// replan reports whether a full sync must plan every service again: when
// there is no plan yet, or when the node's addresses and routes in env
// changed, or when the Nodes, the API server's addresses or the resolvers
// changed in a way the plan cannot take service by service. Otherwise the
// incremental plan, kept up to date service by service by every sync
// since, is the plan of every service (TestIncrementalMatchesPlan), and a
// sync plans the changed services only. Planning 10,000 services again
// would be a large share of a periodic full sync's own work (see
// BenchmarkFullSyncScale).
//
// A Node that joins, leaves or is renumbered anywhere in the cluster, and
// a change of the API server's addresses or of the resolvers, change only
// what the guard protects address by address. The plan takes those itself
// (Reguard: reguarded is true) and names the services that have an
// address whose protection changed; only they are planned again, in a
// partial sync. Before, every such change made every proxy plan every
// service and read the whole kernel: at 10,000 services the daemon soak's
// Node churn kept the proxy in full syncs (`make daemon-soak`).
func (l *Loop) replan(o *planner.Options, env *nodeenv.Env, nodes *nodeInputs) (replan, reguarded bool, services []types.NamespacedName) {
	if l.plan == nil || !sameEnv(env, &l.env) {
		return true, false, nil
	}
	if slices.Equal(o.APIServerAddrs, l.planned.APIServerAddrs) && slices.Equal(o.Resolvers, l.planned.Resolvers) &&
		slices.EqualFunc(nodes.nodes, l.nodes, sameNode) && slices.Equal(nodes.refusals, l.nodeRefusals) {
		return false, false, nil
	}
	services, ok := l.plan.Reguard(*o, nodes.nodes, nodes.refusals)
	if !ok {
		l.Log.Info("this node's Node or the options changed; planning every service again")
		return true, false, nil
	}
	l.nodes, l.nodeRefusals = nodes.nodes, nodes.refusals
	l.planned = *o
	l.Log.Info("the Nodes or the API server's addresses changed; planning again only the services that name an address whose protection changed",
		zap.Int("nodes", len(nodes.nodes)), zap.Int("services", len(services)))
	return false, true, services
}

// mergeNames are the names in a and b, sorted, without duplicates; a and
// b are not modified.
func mergeNames(a, b []types.NamespacedName) []types.NamespacedName {
	out := slices.Concat(a, b)
	slices.SortFunc(out, model.CompareServices)
	return slices.Compact(out)
}

// sameNode reports whether two conversions of a Node plan alike.
func sameNode(a, b model.Node) bool {
	return a.Name == b.Name && slices.Equal(a.Addresses, b.Addresses) && slices.Equal(a.PrimaryIPs, b.PrimaryIPs) &&
		slices.Equal(a.PodCIDRs, b.PodCIDRs) && maps.Equal(a.Labels, b.Labels) && a.LastSeen.Equal(b.LastSeen)
}

// apiServerAddrs are the addresses protected as the API server now: the
// Source's endpoints of default/kubernetes and the dialed host unless it is
// a Service IP (guard.APIServer), with Options.APIServerAddrs.
func (l *Loop) apiServerAddrs() []netip.Addr {
	api := l.APIServer
	api.Endpoints = l.Source.APIServerEndpoints()
	api.IsServiceIP = l.Source.IsServiceIP
	return append(slices.Clone(l.Options.APIServerAddrs), api.Addrs()...)
}

// sameEnv reports whether two syncs read the same node: addresses, routes,
// resolvers and listening sockets (the rest of the options never change).
func sameEnv(a, b *nodeenv.Env) bool {
	return slices.Equal(a.LocalAddrs, b.LocalAddrs) && slices.Equal(a.LocalPrefixes, b.LocalPrefixes) &&
		slices.Equal(a.Gateways, b.Gateways) && slices.Equal(a.NextHops, b.NextHops) && slices.Equal(a.Resolvers, b.Resolvers) &&
		slices.Equal(a.Listeners, b.Listeners)
}
