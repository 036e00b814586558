package daemon

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"slices"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
)

// Critical Services first (docs/architecture.md): a new node in a large
// cluster reaches neither the API server's ClusterIP nor the cluster DNS
// until its first full sync is done, minutes at tens of thousands of
// Services. So the first sync after the caches synced plans and applies
// default/kubernetes and the cluster DNS alone before it plans the rest,
// and the full sync that follows finds them as it wants them.

// CriticalApplier is an Applier that applies the critical Services' plan
// before the first full sync: *applier.Applier (Applier.Critical). already
// says every one of their addresses was bound (a restart): nothing was
// changed.
type CriticalApplier interface {
	Critical(st *planner.State) (res *applier.Result, already bool, err error)
}

// ClusterDNSSource is a Source that finds the cluster DNS Services:
// *informers.Watcher.
type ClusterDNSSource interface {
	ClusterDNS() []types.NamespacedName
}

// Critical applies the critical Services' plan (applier.Applier.Critical).
func (k *kernel) Critical(st *planner.State) (*applier.Result, bool, error) {
	return k.app.Critical(st)
}

var _ CriticalApplier = (*kernel)(nil)

// criticalNames are the critical Services among cached, in the order they
// are served: default/kubernetes, then l.Critical (--critical-services), or
// when none is named the Source's cluster DNS.
func (l *Loop) criticalNames(cached []types.NamespacedName) []types.NamespacedName {
	names := []types.NamespacedName{guard.APIServerService}
	switch dns, ok := l.Source.(ClusterDNSSource); {
	case len(l.Critical) > 0:
		names = append(names, l.Critical...)
	case ok:
		names = append(names, dns.ClusterDNS()...)
	}
	out := make([]types.NamespacedName, 0, len(names))
	for _, n := range names {
		if _, found := slices.BinarySearchFunc(cached, n, model.CompareServices); found && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// serveCritical plans the critical Services into the new plan and applies
// them alone, before the first full sync plans the rest: once, the first
// time a sync replans after the caches synced. cached are the Services
// the full sync then plans (sorted). The plan's later Update of the same
// Services finds nothing changed.
func (l *Loop) serveCritical(cached []types.NamespacedName) {
	l.criticalDone = true
	ca, ok := l.Applier.(CriticalApplier)
	if !ok {
		return
	}
	names := l.criticalNames(cached)
	if len(names) == 0 {
		l.Log.Info("no critical Service is cached; the first full sync programs every Service in its order")
		return
	}
	start := l.Clock.Now()
	for _, k := range names {
		ports, eps, refusals := l.Source.Service(k)
		l.plan.Update(k, ports, eps, refusals)
	}
	st := l.plan.State()
	if l.OnPlan != nil {
		l.OnPlan(l.plan.Guard(), &st)
	}
	res, already, err := ca.Critical(&st)
	now := l.Clock.Now()
	fields := []zap.Field{zap.Stringers("services", names), zap.Duration("sinceCachesSynced", now.Sub(l.cachesSynced)),
		zap.Duration("took", now.Sub(start))}
	switch {
	case err != nil:
		l.Log.Warn("critical Services not served before the first full sync; it serves them with the others", append(fields, zap.Error(err))...)
	case already:
		l.Log.Info("critical Services already served: their addresses are bound", fields...)
	case res.Err() != nil:
		l.Log.Warn("critical Services served in part; the first full sync retries the rest", append(fields, zap.Error(res.Err()))...)
	default:
		l.Log.Info("critical Services served", fields...)
	}
}
