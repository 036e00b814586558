package daemon

import (
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// What a finished sync leaves behind: its retry, its log line, its
// metrics, health and Events, and the Observe hook.

// conclude records a sync begun at start: its duration and outcome, then
// finish's bookkeeping and the Observe hook.
func (l *Loop) conclude(rep *SyncReport, start time.Time, changes informers.Changes, st *planner.State, res *applier.Result, err error) {
	rep.Duration = l.Clock.Since(start)
	if err == nil {
		err = res.Err()
	}
	rep.Err = err
	l.finish(rep, changes, st, res)
	if l.Observe != nil {
		l.Observe(*rep, l.stats)
	}
}

// finish records the outcome: retries, metrics, health, Events.
func (l *Loop) finish(rep *SyncReport, changes informers.Changes, st *planner.State, res *applier.Result) {
	mode := metrics.ModePartial
	if rep.Full {
		mode = metrics.ModeFull
		l.stats.Full++
	} else {
		l.stats.Partial++
	}
	now := l.Clock.Now()
	if res != nil && res.Drift.Total() > 0 {
		l.noteDrift(mode, res.Drift)
	}
	failed := map[types.NamespacedName]bool{}
	if rep.Err != nil {
		l.stats.Failed++
		l.scheduleRetry(now)
		if res == nil {
			// Nothing is known to be applied: every change is retried,
			// as a full sync.
			l.needFull = true
			l.Source.Requeue(changes.Services)
			for _, s := range changes.Services {
				failed[s] = true
			}
		} else {
			var keys []types.NamespacedName
			for _, s := range res.FailedServices() {
				if s.IsZero() {
					l.needFull = true
					continue
				}
				if !failed[s.NamespacedName] {
					failed[s.NamespacedName] = true
					keys = append(keys, s.NamespacedName)
				}
			}
			l.Source.Requeue(keys)
		}
		l.Log.Warn("sync failed; retrying", zap.String("mode", mode), zap.Duration("took", rep.Duration),
			zap.Duration("retryIn", l.backoff), zap.Bool("retryFull", l.needFull), zap.Error(rep.Err))
	} else {
		l.backoff = 0
		l.retryAt = time.Time{}
		l.Log.Debug("sync done", append([]zap.Field{zap.String("mode", mode), zap.Duration("took", rep.Duration),
			zap.Int("services", len(changes.Services)), zap.Bool("replanned", rep.Replanned), zap.Int("turns", rep.Turns)}, rep.Stages.fields()...)...)
	}
	if rep.Full && rep.Err == nil && !l.firstFullDone && st != nil {
		l.firstFullDone = true
		l.Log.Info("first full sync applied", zap.Duration("took", rep.Duration),
			zap.Duration("sinceStart", now.Sub(l.started)),
			zap.Int("virtualServers", len(st.VirtualServers)), zap.Int("addresses", len(st.Addresses)),
			zap.Int("refusals", len(st.Refusals)))
	}
	if l.Health != nil {
		if rep.Err == nil {
			l.Health.Updated()
		}
		if rep.Err != nil || l.Source.Pending() > 0 {
			l.Health.QueuedUpdate()
		}
	}
	if l.Metrics != nil {
		l.observe(mode, rep, changes, failed, st, now)
		l.observeConntrack(res)
	}
	if l.Events != nil && st != nil {
		if _, limited := l.Events.Report(st.Refusals); limited > 0 {
			l.Log.Debug("refusal events rate-limited", zap.Int("held", limited))
		}
	}
}

// noteDrift logs and counts what a sync found changed by others, and
// repaired.
func (l *Loop) noteDrift(mode string, d layer.Drift) {
	l.Log.Info("repaired kernel state changed outside the proxy", zap.String("mode", mode),
		zap.Int("virtualServers", d[ipvs.DriftVirtualServer]), zap.Int("addresses", d[addrmgr.DriftAddress]),
		zap.Int("ipsetEntries", d[iptables.DriftIPSetEntry]), zap.Int("ipsets", d[iptables.DriftIPSet]), zap.Int("iptablesTables", d[iptables.DriftIPTablesTable]), zap.Int("arpTable", d[iptables.DriftARPTable]))
	if l.Metrics != nil {
		l.Metrics.AddDriftRepairs(map[string]int{
			metrics.DriftVirtualServer: d[ipvs.DriftVirtualServer], metrics.DriftAddress: d[addrmgr.DriftAddress],
			metrics.DriftIPSetEntry: d[iptables.DriftIPSetEntry], metrics.DriftIPSet: d[iptables.DriftIPSet], metrics.DriftIPTablesTable: d[iptables.DriftIPTablesTable],
			metrics.DriftARPTable: d[iptables.DriftARPTable],
		})
	}
}

// observe records a finished sync in the metrics: its duration and
// outcome, the pending changes, the network programming latency of the
// changes it applied (failed ones are not), and the planned state's sizes
// and refusals.
func (l *Loop) observe(mode string, rep *SyncReport, changes informers.Changes, failed map[types.NamespacedName]bool, st *planner.State, now time.Time) {
	l.Metrics.ObserveSync(mode, rep.Duration, rep.Err == nil)
	l.Metrics.PendingChanges.Set(float64(l.Source.Pending()))
	for key, t := range changes.Triggers {
		// As kube-proxy: a change from before this process started
		// (the initial list) says nothing about its latency.
		if !failed[key] && !t.IsZero() && !t.Before(l.started) {
			l.Metrics.NetworkProgrammingLatency.Observe(now.Sub(t).Seconds())
		}
	}
	if st == nil {
		return
	}
	// Counted by the plan as winners change: a walk of 200,000 real
	// servers per partial sync would cost more than the change.
	l.Metrics.VirtualServers.Set(float64(len(st.VirtualServers)))
	l.Metrics.RealServers.Set(float64(l.plan.RealServers()))
	l.Metrics.Addresses.Set(float64(len(st.Addresses)))
	for f, n := range l.noLocal {
		l.Metrics.KubeProxy.SetNoLocalEndpoints(metrics.IPFamilies[f], n.Internal, n.External)
	}
	if sameRefusals(st.Refusals, l.counted) {
		// The plan hands on unchanged refusals as the same slice.
		return
	}
	l.counted = st.Refusals
	byReason := map[string]int{}
	for _, r := range st.Refusals {
		byReason[string(r.Reason)]++
	}
	l.Metrics.SetRefusals(byReason)
}

// observeConntrack records the sync's conntrack flow deletions, each
// family's as one round of kube-proxy's conntrack reconciler.
func (l *Loop) observeConntrack(res *applier.Result) {
	if res == nil || res.IPVS == nil {
		return
	}
	for f, round := range res.IPVS.Conntrack {
		if round.Ran {
			l.Metrics.KubeProxy.ConntrackReconciled(metrics.IPFamilies[f], round.Took.Seconds(), round.Entries)
		}
	}
}

// sameRefusals reports whether a and b are the same slice: the same first
// element and length, and not nil.
func sameRefusals(a, b []model.Refusal) bool {
	return a != nil && b != nil && len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func (l *Loop) scheduleRetry(now time.Time) {
	if l.backoff == 0 {
		l.backoff = l.BackoffInitial
	} else {
		l.backoff *= 2
		if l.backoff > l.BackoffMax {
			l.backoff = l.BackoffMax
		}
	}
	l.retryAt = now.Add(l.backoff)
}
