package daemon

import (
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// turn is the periodic full sync's applier.Turn (the full sync in turns,
// docs/architecture.md): when services changed since the full sync took
// its changes, it plans and applies them as a partial sync, reported and
// counted as one (Observe sees it before the full sync), and returns the
// state the full sync goes on with. A change that arrives during a
// periodic full sync then waits for one of its steps, not for all of it.
//
// It returns nil, leaving the changes to the sync after the full one,
// when nothing waits, when --min-sync-period has not passed since the
// last sync began, while a failed sync's retry backs off, and when the
// node's addresses differ from those the
// full sync plans with (a sync that plans everything is then due). A Node
// change taken with the services is left to the next sync
// (nodesWaiting): a turn plans the changed services alone.
func (l *Loop) turn() *planner.State {
	if l.Source.Pending() == 0 {
		return nil
	}
	start := l.Clock.Now()
	if l.MinSyncPeriod > 0 && start.Before(l.lastStart.Add(l.MinSyncPeriod)) {
		return nil
	}
	if start.Before(l.retryAt) {
		// A failed sync's retry waits out its backoff, turn or not.
		return nil
	}
	var rep SyncReport
	sw := newStopwatch(l.Clock)
	o, env, err := l.options(false, &rep.Stages)
	if err != nil || !sameEnv(&env, &l.env) {
		return nil
	}
	sw.lap(&rep.Stages.Env)
	changes := l.takeChanges()
	if changes.Nodes {
		l.nodesWaiting, l.dirty = true, true
		changes.Nodes = false
	}
	if len(changes.Services) == 0 {
		return nil
	}
	l.lastStart = start
	rep.Services = changes.Services
	rep.Stages.waited(changes, start)
	st, res, err := l.apply(&rep, o, nodeInputs{}, &sw)
	l.conclude(&rep, start, changes, st, res, err)
	// Planned, the state is the plan's even when the apply failed (the
	// failed services are retried); the full sync applies it whole.
	return st
}
