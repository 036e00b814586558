package daemon

import (
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
)

// Stages are how long the changes of one sync waited for it and how long
// its steps took. The sync loop's debug line "sync done" logs them (the
// applier's "sync applied" splits Apply further), so that one change can
// be followed from the API write to the kernel (`make bench-vs-kube-proxy
// BENCHVS_BREAKDOWN=1` reports them beside the latency floor).
type Stages struct {
	// Delivered runs from the oldest EndpointSlice change trigger time of
	// the sync's changes (the endpoints.kubernetes.io/last-change-trigger-time
	// annotation: the API write, when the writer sets it to the time it
	// wrote) to the Watcher's handler recording the first change; Waited
	// from that record to the sync's start (the loop's wake-up). Zero when
	// unknown: no trigger, a Requeue, a periodic sync.
	Delivered, Waited time.Duration
	// Env is the read of the node's addresses and routes, Plan the
	// planning of the changed services (all of them in a full sync) and
	// of the state, Health the healthCheckNodePort servers' update, Apply
	// the applier's kernel work.
	Env, Plan, Health, Apply time.Duration
	// ReadEnv is, in a periodic full sync, the node's read beside the
	// loop (not in the sync's duration; Env is then nothing).
	ReadEnv time.Duration
}

// waited fills Delivered and Waited from the changes a sync taken at start.
func (s *Stages) waited(c informers.Changes, start time.Time) {
	if c.Seen.IsZero() || start.Before(c.Seen) {
		return
	}
	s.Waited = start.Sub(c.Seen)
	var oldest time.Time
	for _, t := range c.Triggers {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	if !oldest.IsZero() && !c.Seen.Before(oldest) {
		s.Delivered = c.Seen.Sub(oldest)
	}
}

// fields are the log fields of the stages.
func (s *Stages) fields() []zap.Field {
	return []zap.Field{zap.Duration("deliveredIn", s.Delivered), zap.Duration("waited", s.Waited),
		zap.Duration("envTook", s.Env), zap.Duration("planTook", s.Plan), zap.Duration("healthTook", s.Health),
		zap.Duration("applyTook", s.Apply), zap.Duration("readEnvTook", s.ReadEnv)}
}

// stopwatch adds the time since its last lap to a stage; a nil one
// times nothing.
type stopwatch struct {
	clock clock.PassiveClock
	mark  time.Time
}

func newStopwatch(c clock.PassiveClock) stopwatch { return stopwatch{clock: c, mark: c.Now()} }

func (w *stopwatch) lap(d *time.Duration) {
	if w == nil {
		return
	}
	now := w.clock.Now()
	*d += now.Sub(w.mark)
	w.mark = now
}
