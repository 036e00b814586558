package daemon

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/recovery"
)

// guardPass is the startup's guard-only pass, before the informer caches
// are waited for: it removes from kube-ipvs0 every address the guard
// protects with what is known offline — the node's own addresses and
// routes (read now; not its resolvers, which may be Service IPs), nodes (the node address cache: the Nodes last seen,
// and the deleted ones still remembered), o's API server addresses and
// CIDRs — and every prefix wider than a host prefix, with the IPVS virtual
// servers on them unless the address stays local (recovery.Find and
// Apply, as `recover` does offline). A protected address left on
// kube-ipvs0 by an earlier proxy may be what keeps this node from reaching
// the API server, and so from ever syncing. Nothing else is touched: the
// addresses no Service wants wait for the first full sync.
func (k *kernel) guardPass(o planner.Options, nodes []model.Node, log *zap.Logger) error {
	env, err := k.env.Read(true)
	if err != nil {
		return fmt.Errorf("read the node's addresses: %w", err)
	}
	// Not the resolvers: one may be the cluster DNS's ClusterIP, and the
	// Services are not known yet.
	o.LocalAddrs, o.LocalPrefixes, o.Gateways, o.NextHops = env.LocalAddrs, env.LocalPrefixes, env.Gateways, env.NextHops
	g := guard.New(planner.GuardInputs(&o, nodes))
	bound, err := k.link.Addrs()
	if err != nil {
		return fmt.Errorf("ip addr show dev %s: %w", addrmgr.Device, err)
	}
	vss, err := k.table.Services()
	if err != nil {
		return fmt.Errorf("ipvsadm -S -n: %w", err)
	}
	findings := recovery.Find(recovery.Facts{Bound: bound, VirtualServers: vss, Guard: g, ExcludeCIDRs: o.ExcludeCIDRs})
	res := recovery.Apply(k.link, k.table, findings)
	for _, fd := range findings {
		if !slices.Contains(res.Unbound, fd.Address) {
			continue
		}
		log.Warn("removed a protected address from "+addrmgr.Device+" before syncing", zap.Stringer("address", fd.Address),
			zap.String("reason", string(fd.Reason)), zap.String("detail", fd.Detail), zap.Int("virtualServers", len(fd.VirtualServers)))
	}
	log.Info("startup guard pass done", zap.Int("bound", len(bound)), zap.Int("removed", len(res.Unbound)),
		zap.Int("virtualServersDeleted", len(res.Deleted)), zap.Int("nodesKnown", len(nodes)))
	return errors.Join(res.Errors...)
}
