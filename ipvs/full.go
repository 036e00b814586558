package ipvs

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Full dumps the table once, adopts the virtual servers the ownership rule
// says are ours, creates and updates every desired virtual server, deletes
// owned ones no longer desired, and runs the graceful-termination queue.
// The error is non-nil only when the table could not be read; per-service
// failures are in the Result. FullFrom is the same over a dump read off
// the caller's goroutine (BeginFull).
//
// The mirror keeps the real-server lists of desired (Full's and
// Partial's) that it programmed exactly, rather than copies: the caller
// must not modify a desired virtual server's RealServers afterwards (the
// planner's states are read-only; a new plan makes new lists).
func (r *Reconciler) Full(d Desired) (*Result, error) {
	r.since = nil
	dump, err := readDump(r.t, r.digests(), r.opts.Stats.statsReader(r.t), r.opts.Clock)
	if err != nil {
		return nil, err
	}
	return r.full(dump, nil, d.VirtualServers, d.Own, nil), nil
}

// full is Full over dump, the table as read and compared with the mirror
// as it was when the read began, except the virtual servers in since,
// written by this reconciler after the read began: for those the mirror
// is newer than the dump, and it is kept. Every other mirror entry the
// dump does not name held what the mirror says.
//
// The mirror is updated in place: an entry the dump shows as it is stays,
// with the plan's list it may share, so that a full sync of an unchanged
// table allocates next to nothing beyond the dump, and the apply of each
// desired virtual server finds it programmed (apply's fast path).
//
// turn, when not nil, is called between two batches of desired virtual
// servers (layer.Turn); the walk goes on in the desired list it returns.
func (r *Reconciler) full(dump *Dump, since map[Key]bool, desired []VirtualServer, own Ownership, turn layer.Turn[Desired]) *Result {
	r.loadJournal()
	if dump.counted && r.opts.Stats.Publish != nil {
		r.opts.Stats.Publish(labelStats(dump.Stats, desired, dump.Read))
	}
	r.fulls++
	gen := r.fulls
	cov := own.Coverage()
	start := r.opts.Clock.Now()
	res := &Result{}
	var drift driftNotes
	// want is the desired virtual servers by key, built only if the dump
	// holds one the mirror, the journal and the rule do not make ours (a
	// foreign one, or one only desired).
	var want map[Key]bool
	wanted := func(k Key) bool {
		if want == nil {
			want = make(map[Key]bool, len(desired))
			for i := range desired {
				want[desired[i].Key] = true
			}
		}
		return want[k]
	}
	for _, vs := range dump.Changed {
		if r.excluded(vs.Address) || since[vs.Key] {
			continue
		}
		p := r.mirror[vs.Key]
		if p != nil && sameService(p.vs, vs) && sameRealServers(p.vs.RealServers, vs.RealServers) {
			// The kernel holds what the mirror says (the mirror learned
			// it after the read began).
			continue
		}
		// What this process created or adopted, or an earlier one
		// journaled, stays ours even when the rule alone would not say so
		// (an L4-only server on a node address for a protected externalIP,
		// outside the NodePort range; one whose address was unbound first).
		if p == nil && !r.journal.owns(vs.Key) && !r.covers(cov, vs.Key) && !wanted(vs.Key) {
			continue
		}
		// The dump's list is its own copy (readDump).
		m := &mirrorVS{vs: vs}
		if p != nil {
			what := "real servers added, deleted or reweighted outside the proxy"
			if !sameService(p.vs, vs) {
				what = fmt.Sprintf("scheduler, flags or persistence changed outside the proxy (-s %s -p %d)", vs.Scheduler, vs.PersistenceTimeout)
			}
			drift.note(vs.Key, p.service, what)
			m.service = p.service
			m.vs.Service = p.service
			m.wanted = p.wanted
		} else {
			drift.note(vs.Key, model.ServicePortName{}, "virtual server added outside the proxy on an address it owns")
		}
		r.mirror[vs.Key] = m
	}
	for _, k := range dump.Missing {
		if m := r.mirror[k]; m != nil && !since[k] {
			drift.note(k, m.service, "virtual server deleted outside the proxy")
			r.forget(k)
		}
	}
	if r.synced {
		res.Drift.Add(DriftVirtualServer, drift.log(r.log))
	}
	// Forget queued real servers the kernel no longer has.
	for g := range r.grace {
		if m := r.mirror[g.Key]; m == nil || m.findRS(g.Addr, g.Port) < 0 {
			delete(r.grace, g)
		}
	}
	// The virtual servers the mirror lacks are created createBatch at a
	// time, each batch's real servers added right after it: a new one
	// waits for its real servers no longer than a batch takes.
	for lo := 0; lo < len(desired); {
		batch := desired[lo:min(lo+createBatch, len(desired))]
		refused := r.createAll(batch, res)
		for i := range batch {
			if refused[batch[i].Key] {
				continue
			}
			if m := r.apply(&batch[i], res); m != nil {
				m.wanted = gen
			}
		}
		lo += len(batch)
		if turn != nil && lo < len(desired) {
			if next, ok := r.takeTurn(turn, gen); ok {
				desired, lo = next, resumeAfter(next, batch[len(batch)-1].Key)
			}
		}
	}
	var stale []Key
	for k, m := range r.mirror {
		if m.wanted != gen {
			stale = append(stale, k)
		}
	}
	slices.SortFunc(stale, CompareKeys)
	for _, k := range stale {
		r.deleteVS(k, res)
	}
	r.synced = true
	r.settleAll = true
	r.processGrace(start, res)
	r.logResult("full", res)
	return res
}

// createBatch is how many desired virtual servers a full sync creates in
// one AddServices before adding their real servers.
const createBatch = 512

// driftNotes are the differences a full sync found between the dump and
// the mirror: what others changed since the proxy last wrote.
type driftNotes []driftNote

type driftNote struct {
	k       Key
	service model.ServicePortName
	what    string
}

func (d *driftNotes) note(k Key, service model.ServicePortName, what string) {
	*d = append(*d, driftNote{k, service, what})
}

// log logs every difference, in key order, and returns their number.
func (d driftNotes) log(log *zap.Logger) int {
	slices.SortFunc(d, func(a, b driftNote) int { return CompareKeys(a.k, b.k) })
	for _, n := range d {
		log.Info("repairing IPVS drift", zap.Stringer("virtualServer", n.k), zap.Stringer("service", n.service), zap.String("what", n.what))
	}
	return len(d)
}
