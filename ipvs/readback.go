package ipvs

import "errors"

// ErrNoRead is returned by FullFrom without a BeginRead before it.
var ErrNoRead = errors.New("ipvs reconciler: FullFrom without BeginRead")

// BeginRead starts a full sync whose dump is read off the reconciler's
// goroutine, so that partial syncs go on while the kernel is read: at
// 10,000 services the dump is most of a full sync. It returns the read,
// `ipvsadm -S -n` of the whole table, to run once on any goroutine (it
// uses Options.Reader only), and from now on records every virtual server
// this reconciler writes. FullFrom then takes what the read returned.
//
// A virtual server written after the read began may be in the dump as it
// was before the write or after it; the mirror is newer, and FullFrom
// keeps the mirror's view of it, repairing it at the next full sync if it
// drifted. Every other one is compared with the dump as Full does.
func (r *Reconciler) BeginRead() func() ([]VirtualServer, error) {
	r.since = make(map[Key]bool)
	t := r.opts.Reader
	if t == nil {
		t = r.t
	}
	return t.Services
}

// FullFrom is Full over kernel, what the read BeginRead returned gave.
// Calling Full or FullFrom ends the read: a later FullFrom needs another
// BeginRead.
func (r *Reconciler) FullFrom(kernel []VirtualServer, desired []VirtualServer, own Ownership) (*Result, error) {
	if !r.reading() {
		return nil, ErrNoRead
	}
	since := r.since
	r.since = nil
	return r.full(kernel, since, desired, own), nil
}

// reading reports whether a BeginRead is waiting for its FullFrom.
func (r *Reconciler) reading() bool { return r.since != nil }

// wrote records that k is being written, while a read is under way.
func (r *Reconciler) wrote(k Key) {
	if r.since != nil {
		r.since[k] = true
	}
}
