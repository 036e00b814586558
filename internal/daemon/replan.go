package daemon

import (
	"maps"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
)

// nodeInputs are the Nodes a full sync read from the Source, and what was
// refused of them.
type nodeInputs struct {
	nodes    []model.Node
	refusals []model.Refusal
}

// replan reports whether a full sync must plan every service again: when
// there is no plan yet, or when anything the plan was built from other
// than the services changed since (the node's addresses and routes in
// env, the API server's addresses, the resolvers, the Nodes, including
// deleted ones whose grace period ended). Otherwise the incremental plan,
// kept up to date service by service by every sync since, is the plan of
// every service (TestIncrementalMatchesPlan), and the periodic full sync
// plans the changed services only and spends its time on what it is for:
// reading the kernel back and repairing it. Planning 10,000 services again
// would be half of its own work (BenchmarkFullSyncScale).
func (l *Loop) replan(o *planner.Options, env *nodeenv.Env, nodes *nodeInputs) bool {
	return l.plan == nil || !sameEnv(env, &l.env) ||
		!slices.Equal(o.APIServerAddrs, l.planned.APIServerAddrs) || !slices.Equal(o.Resolvers, l.planned.Resolvers) ||
		!slices.EqualFunc(nodes.nodes, l.nodes, sameNode) || !slices.Equal(nodes.refusals, l.nodeRefusals)
}

// sameNode reports whether two conversions of a Node plan alike.
func sameNode(a, b model.Node) bool {
	return a.Name == b.Name && slices.Equal(a.Addresses, b.Addresses) && slices.Equal(a.PrimaryIPs, b.PrimaryIPs) &&
		slices.Equal(a.PodCIDRs, b.PodCIDRs) && maps.Equal(a.Labels, b.Labels) && a.LastSeen.Equal(b.LastSeen)
}
