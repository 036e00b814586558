// Package layer holds the contract between the applier and the three
// kernel layers it drives — the IPVS reconciler (ipvs), the kube-ipvs0
// address manager (addrmgr) and the ipset and iptables syncer (iptables) —
// so that it reads the same in each: one interface for a layer (Layer),
// one failure and result (Failure, Result), one count of what others
// changed (Drift), one error of a stale read (ErrNoRead), and how a sync's
// failures become one error (Join). It imports nothing of the project and
// touches no kernel.
package layer

import (
	"errors"
	"fmt"
)

// Layer is one kernel layer as the applier drives it: D is what the layer
// is asked to make the kernel hold, R what its full sync reads beside the
// sync loop, Res its result (a Result and the layer's own counts).
//
// The error of each method is non-nil only when the layer could not read
// the kernel, or has not yet: then it changed nothing. What it could not
// change is a Failure in Res, and the next sync retries it.
type Layer[D, R, Res any] interface {
	// Full reads the kernel once and makes it hold d, repairing what
	// others changed since the last read (Drift).
	Full(d D) (Res, error)
	// Partial makes the kernel hold d from the layer's view of it, kept
	// since the last Full; it reads as little as it can, and repairs
	// only what d changed.
	Partial(d D) (Res, error)
	// Cleanup removes what the layer owns and nothing else; d is the
	// state of an empty cluster.
	Cleanup(d D) (Res, error)
	// BeginFull starts a full sync whose read runs beside the sync loop:
	// it returns the read, to run once on any goroutine, and from now on
	// the layer records what it writes. FullFrom then takes what the read
	// returned.
	BeginFull() func() (R, error)
	// FullFrom is Full with the kernel as read found it, keeping the
	// layer's own view of what it wrote since BeginFull; it wraps
	// ErrNoRead when no read is begun or a Full ran since. turn, when not
	// nil, is the changes waiting beside the sync (Turn).
	FullFrom(d D, read R, turn Turn[D]) (Res, error)
}

// Turn is a full sync's turn for the changes waiting beside it (the full
// sync in turns, docs/architecture.md): a layer that syncs in batches
// calls it between two, and goes on with the desired state it returns;
// false means nothing was waiting. A layer that syncs in one step does not
// call it: the applier gives the changes their turn between layers.
type Turn[D any] func() (D, bool)

// ErrNoRead is wrapped by a layer's FullFrom when there is no read to
// apply: none was begun, or a full sync ran since it began, so what it
// read is stale. The applier then syncs from a fresh read.
var ErrNoRead = errors.New("no read to apply")

// Failure is one object a layer could not make right: its identity, which
// says what and where ("service ns/web:http virtual server TCP/...", "bind
// 10.96.0.10/32 on kube-ipvs0"), and why.
type Failure[ID fmt.Stringer] struct {
	ID  ID
	Err error
}

func (f Failure[ID]) Error() string { return fmt.Sprintf("%s: %v", f.ID, f.Err) }

func (f Failure[ID]) Unwrap() error { return f.Err }

// Result is what every layer's sync reports: what failed, and what it
// found changed by others and put back. A layer's own result embeds it
// beside its counts.
type Result[ID fmt.Stringer] struct {
	Failures []Failure[ID]
	// Drift is known in a full sync (and in a layer that reads the kernel
	// in a partial sync too, when it did).
	Drift Drift
}

// Fail records that id could not be made right.
func (r *Result[ID]) Fail(id ID, err error) {
	r.Failures = append(r.Failures, Failure[ID]{ID: id, Err: err})
}

// Err joins the failures, or is nil.
func (r *Result[ID]) Err() error { return Join(r.Failures) }

// Kind is a kind of kernel object whose drift a layer counts; its value is
// the kind label of the drift-repairs counter (internal/metrics).
type Kind string

// Drift counts, by kind, what a sync found changed in the kernel by others
// since the proxy last wrote it, and repaired: the difference between the
// kernel and the layer's view of what it wrote, not changes of the plan.
// The zero value counts nothing.
type Drift map[Kind]int

// Add counts n more of kind k.
func (d *Drift) Add(k Kind, n int) {
	if n == 0 {
		return
	}
	if *d == nil {
		*d = Drift{}
	}
	(*d)[k] += n
}

// Merge adds o's counts to d's.
func (d *Drift) Merge(o Drift) {
	for k, n := range o {
		d.Add(k, n)
	}
}

// Total is the number of repairs of every kind.
func (d Drift) Total() int {
	n := 0
	for _, c := range d {
		n += c
	}
	return n
}

// Join joins a sync's failures into one error, nil for none; errors.Is and
// errors.As see each.
func Join[F error](failures []F) error {
	if len(failures) == 0 {
		return nil
	}
	errs := make([]error, len(failures))
	for i, f := range failures {
		errs[i] = f
	}
	return errors.Join(errs...)
}
