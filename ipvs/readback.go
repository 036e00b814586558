package ipvs

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Dump is a full sync's read of the table, compared while it was read
// with the mirror as the reconciler saw it when the read began: what the
// full sync must look at, and nothing it need not. A dump that held the
// whole table would be live until the loop compares it (see
// BenchmarkReadbackFullSyncScale); an unchanged table's Dump is empty.
type Dump struct {
	// Changed are the virtual servers whose Digest differs from the
	// mirror's, or that the mirror lacked (someone else's, or one to
	// adopt), with real-server lists of their own, in key order.
	Changed []VirtualServer
	// Missing are the mirror's virtual servers the table no longer held,
	// in key order.
	Missing []Key
	// Listed is how many virtual servers the table held.
	Listed int
	// Stats are every listed virtual server's counters, in key order,
	// when the reconciler keeps them (Options.Stats); counted says it
	// does, Read is when the read ended.
	Stats   []Stats
	counted bool
	Read    time.Time
}

// BeginFull starts a full sync whose dump is read off the reconciler's
// goroutine, so that partial syncs go on while the kernel is read: at
// scale the dump is most of a full sync (BenchmarkReadbackFullSyncScale).
// It returns the read,
// `ipvsadm -S -n` of the whole table compared with the mirror as it is
// now, to run once on any goroutine (it uses Options.Reader and its own
// copy of the mirror's digests only), and from now on records every
// virtual server this reconciler writes. FullFrom then takes what the
// read returned.
//
// A virtual server written after the read began may be in the dump as it
// was before the write or after it; the mirror is newer, and FullFrom
// keeps the mirror's view of it, repairing it at the next full sync if it
// drifted. Every other one is the mirror's still (a change to it is a
// write), so the digests the read compares with are the mirror's now.
func (r *Reconciler) BeginFull() func() (*Dump, error) {
	r.since = make(map[Key]bool)
	t := r.opts.Reader
	if t == nil {
		t = r.t
	}
	snap, sr, clk := r.digests(), r.opts.Stats.statsReader(t), r.opts.Clock
	return func() (*Dump, error) { return readDump(t, snap, sr, clk) }
}

// FullFrom is Full over the table as dump, what the read BeginFull
// returned, found it. Calling Full or FullFrom ends the read: a later
// FullFrom needs another BeginFull.
//
// turn, when not nil, gives changes waiting beside the full sync their
// turn between its batches (turn.go): d.VirtualServers must then be
// sorted by CompareKeys, as a planner's state is, and so must each list
// turn returns.
func (r *Reconciler) FullFrom(d Desired, dump *Dump, turn layer.Turn[Desired]) (*Result, error) {
	if !r.reading() {
		return nil, fmt.Errorf("ipvs reconciler: FullFrom without BeginFull: %w", layer.ErrNoRead)
	}
	since := r.since
	r.since = nil
	return r.full(dump, since, d.VirtualServers, d.Own, turn), nil
}

// reading reports whether a BeginFull is waiting for its FullFrom.
func (r *Reconciler) reading() bool { return r.since != nil }

// wrote records that k is being written, while a read is under way.
func (r *Reconciler) wrote(k Key) {
	if r.since != nil {
		r.since[k] = true
	}
}

// keyDigest is one mirrored virtual server as a read compares it, and
// whether the read found it.
type keyDigest struct {
	k     Key
	d     Digest
	found bool
}

// digests are the mirror's virtual servers as a read compares them, in
// no order (the read sorts them, off the loop): 72 bytes each, a third of
// what a map of them took.
func (r *Reconciler) digests() []keyDigest {
	snap := make([]keyDigest, 0, len(r.mirror))
	for k, m := range r.mirror {
		snap = append(snap, keyDigest{k: k, d: m.digest()})
	}
	return snap
}

// readDump reads t and compares each virtual server with snap, the
// mirror's digests, which it sorts and marks: what differs is copied into
// the Dump, what equals is counted only. With sr, the same walk keeps
// every virtual server's counters.
func readDump(t Table, snap []keyDigest, sr *statsRead, clk clock.PassiveClock) (*Dump, error) {
	slices.SortFunc(snap, func(a, b keyDigest) int { return CompareKeys(a.k, b.k) })
	d := &Dump{}
	visit := func(vs *VirtualServer) {
		d.Listed++
		if i, ok := slices.BinarySearchFunc(snap, vs.Key, func(e keyDigest, k Key) int { return CompareKeys(e.k, k) }); ok {
			snap[i].found = true
			if snap[i].d == digestOf(vs) {
				return
			}
		}
		c := *vs
		c.RealServers = slices.Clone(vs.RealServers)
		d.Changed = append(d.Changed, c)
	}
	if sr != nil {
		d.counted = true
		if err := sr.walk(d, visit); err != nil {
			return nil, err
		}
		slices.SortFunc(d.Stats, func(a, b Stats) int { return CompareKeys(a.Key, b.Key) })
	} else if w, ok := t.(Walker); ok {
		if err := w.EachService(visit); err != nil {
			return nil, err
		}
	} else {
		vss, err := t.Services()
		if err != nil {
			return nil, err
		}
		for i := range vss {
			visit(&vss[i])
		}
	}
	for _, e := range snap {
		if !e.found {
			d.Missing = append(d.Missing, e.k)
		}
	}
	slices.SortFunc(d.Changed, func(a, b VirtualServer) int { return CompareKeys(a.Key, b.Key) })
	d.Read = clk.Now()
	return d, nil
}
