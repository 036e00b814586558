package addrmgr

// Following kube-ipvs0 between dumps: `ip monitor address dev kube-ipvs0`.
//
// A Manager that watches its device keeps its view of the device's
// addresses without reading the device at every sync. It registers the
// event each of its own changes will cause before making the change; an
// event that matches one is consumed. Any other event that changes what
// the view holds (an address added or removed by someone else), an error
// of the subscription or a lost subscription marks the view stale and calls
// the kick callback, so the owner can sync soon; the next Refresh then
// dumps the device (one RTM_GETADDR dump), and the sync removes what must
// not be there. Without a live subscription every Refresh dumps.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"go.uber.org/zap"
)

// AddrEvent is one address notification of the device: RTM_NEWADDR or
// RTM_DELADDR, as `ip monitor address dev kube-ipvs0` prints them.
type AddrEvent struct {
	Prefix netip.Prefix
	// Added is true for RTM_NEWADDR (added, or changed while there), false
	// for RTM_DELADDR.
	Added bool
}

// Watcher is a Link that can report changes of the device's addresses
// (*kernel.Link, *addrmgrtest.FakeLink).
type Watcher interface {
	// Watch reports every address added to or removed from the device
	// after it returns, in the kernel's order, to event, until ctx ends.
	// event and status are called from one goroutine, never at the same
	// time. status(err) with err != nil says events may have been lost
	// (an overflowing receive buffer, a subscription error, a closed
	// subscription) and the subscription is down; status(nil) says it is
	// up again, and from then on every change is reported. The error is
	// non-nil when no subscription could be made; nothing is reported then.
	Watch(ctx context.Context, event func(AddrEvent), status func(error)) error
}

// Sentinel errors of watching.
var (
	// ErrNoWatch is returned by Manager.Watch for a Link that is no Watcher.
	ErrNoWatch = errors.New("the link cannot report address changes")
	// ErrWatchLost wraps what made a subscription lose events.
	ErrWatchLost = errors.New("address events lost")
)

// maxPending bounds the own changes whose events are awaited: more means
// events are not being delivered, and the view is no longer trusted.
const maxPending = 1 << 16

// pending is an own change whose event is awaited.
type pending struct {
	id    uint64
	added bool
}

// Watch follows the device's addresses through the link's subscription
// until ctx ends (`ip monitor address dev kube-ipvs0`), so that Refresh
// dumps only when something other than the manager changed the device or
// events were lost. kick, when not nil, is called (from another goroutine;
// it must not block) whenever the view went stale: an address added or
// removed by someone else, or the subscription lost or restarted; the owner
// should then sync soon. Call it before the first sync, from the network
// namespace of the link. Without a watch (or when it fails: the error says
// why) every Refresh dumps.
func (m *Manager) Watch(ctx context.Context, kick func()) error {
	w, ok := m.link.(Watcher)
	if !ok {
		return ErrNoWatch
	}
	m.mu.Lock()
	m.kick = kick
	m.pending = map[netip.Prefix][]pending{}
	m.npending = 0
	// What changed before the subscription was not seen.
	m.live = true
	m.staleLocked()
	m.mu.Unlock()
	if err := w.Watch(ctx, m.onEvent, m.onStatus); err != nil {
		m.mu.Lock()
		m.live, m.pending, m.kick = false, nil, nil
		m.mu.Unlock()
		return fmt.Errorf("subscribe to %s addresses: %w", Device, err)
	}
	go func() {
		<-ctx.Done()
		m.mu.Lock()
		m.live, m.pending, m.npending = false, nil, 0
		m.mu.Unlock()
	}()
	m.log.Info("following "+Device+" addresses", zap.String("device", Device))
	return nil
}

// Watching reports whether a live subscription follows the device: then
// Refresh trusts the view unless it went stale.
func (m *Manager) Watching() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// Foreign counts the events of changes made by others that the watch saw.
func (m *Manager) Foreign() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.foreign
}

// expect registers the event an own change of p will cause, before the
// change is made; it returns the id to forget it by if the change fails.
func (m *Manager) expect(p netip.Prefix, added bool) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending == nil || !m.live {
		// Not watching, or no subscription: no event will come.
		return 0
	}
	if m.npending >= maxPending {
		m.pending = map[netip.Prefix][]pending{}
		m.npending = 0
		m.staleLocked()
		m.log.Warn("events of the manager's own changes not delivered: next sync dumps "+Device, zap.Int("pending", maxPending))
	}
	m.seq++
	m.pending[p] = append(m.pending[p], pending{id: m.seq, added: added})
	m.npending++
	return m.seq
}

// forget drops an expectation whose change failed (no event will come).
func (m *Manager) forget(p netip.Prefix, id uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.pending[p]
	for i, x := range q {
		if x.id == id {
			m.setPending(p, append(q[:i:i], q[i+1:]...))
			m.npending--
			return
		}
	}
}

// setPending stores q as p's expectations. Called with mu held.
func (m *Manager) setPending(p netip.Prefix, q []pending) {
	if len(q) == 0 {
		delete(m.pending, p)
	} else {
		m.pending[p] = q
	}
}

// setCur records an own change in the view. Only the syncing goroutine
// writes cur, under mu; the watch goroutine reads it under mu.
func (m *Manager) setCur(p netip.Prefix, bound bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if bound {
		m.cur[p] = true
	} else {
		delete(m.cur, p)
	}
}

// staleLocked marks the view stale. Called with mu held.
func (m *Manager) staleLocked() {
	m.stale = true
	m.gen++
}

// onEvent is the watch's event callback.
func (m *Manager) onEvent(e AddrEvent) {
	m.mu.Lock()
	if m.pending == nil {
		m.mu.Unlock()
		return
	}
	// The first awaited own change of this prefix in the same direction.
	// Events of one prefix come in the order of its changes, so earlier
	// expectations of the prefix will never be met (an add of an address
	// already there, a removal of one already gone): drop them.
	q := m.pending[e.Prefix]
	for i, x := range q {
		if x.added == e.Added {
			m.setPending(e.Prefix, q[i+1:])
			m.npending -= i + 1
			m.mu.Unlock()
			return
		}
	}
	// Nothing the view does not already hold (a change of an address's
	// flags, a second notification), or no view yet (the first dump reads
	// everything).
	if !m.dumped || m.cur[e.Prefix] == e.Added {
		m.mu.Unlock()
		return
	}
	m.foreign++
	m.staleLocked()
	kick := m.kick
	m.mu.Unlock()
	what := "added to"
	if !e.Added {
		what = "removed from"
	}
	m.log.Info("address "+what+" "+Device+" outside the proxy: next sync dumps the device", zap.String("device", Device), zap.Stringer("address", e.Prefix))
	if kick != nil {
		kick()
	}
}

// onStatus is the watch's status callback.
func (m *Manager) onStatus(err error) {
	m.mu.Lock()
	if m.pending == nil {
		// The watch ended (its context) while resubscribing.
		m.mu.Unlock()
		return
	}
	m.live = err == nil
	// The events of changes made before a new subscription will not come.
	m.pending = map[netip.Prefix][]pending{}
	m.npending = 0
	m.staleLocked()
	kick := m.kick
	m.mu.Unlock()
	if err != nil {
		m.log.Warn("following "+Device+" addresses: events lost; syncs dump the device until the subscription is back", zap.String("device", Device), zap.Error(err))
	} else {
		m.log.Info("following "+Device+" addresses again: next sync dumps the device", zap.String("device", Device))
	}
	if kick != nil {
		kick()
	}
}
