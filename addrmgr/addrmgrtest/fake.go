// Package addrmgrtest holds an in-memory kube-ipvs0 for other packages'
// unit tests. It never touches the kernel.
package addrmgrtest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// FakeLink is an in-memory kube-ipvs0 for unit tests: it holds addresses
// as the kernel does and prints them as `ip -o addr show dev kube-ipvs0`
// would list them (one prefix per line). Not a call recorder. As a
// Watcher it reports each change of its addresses — its own AddAddr and
// DelAddr, and Put and Take by "someone else" — from another goroutine, in
// order, as the kernel's subscription does; Lose and Resume break and
// restore the subscription.
type FakeLink struct {
	mu    sync.Mutex
	addrs map[netip.Prefix]bool
	// Dumps counts Addrs calls; Mutations counts successful changes.
	Dumps, Mutations int
	// OnAdd, when set, sees every address just before it is added and may
	// fail the call.
	OnAdd func(netip.Prefix) error
	// WatchErr, when set, is what Watch fails with.
	WatchErr error

	w *fakeWatch
}

var (
	_ addrmgr.Link    = (*FakeLink)(nil)
	_ addrmgr.Watcher = (*FakeLink)(nil)
)

// fakeWatch delivers a FakeLink's notifications from its own goroutine.
type fakeWatch struct {
	event  func(addrmgr.AddrEvent)
	status func(error)
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []func()
	busy   bool
	down   bool
	ended  bool
}

// Watch implements Watcher.
func (f *FakeLink) Watch(ctx context.Context, event func(addrmgr.AddrEvent), status func(error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.WatchErr != nil {
		return f.WatchErr
	}
	w := &fakeWatch{event: event, status: status}
	w.cond = sync.NewCond(&w.mu)
	f.w = w
	go func() {
		<-ctx.Done()
		w.mu.Lock()
		w.ended = true
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	go w.deliver()
	return nil
}

func (w *fakeWatch) deliver() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for len(w.queue) == 0 && !w.ended {
			w.cond.Wait()
		}
		if w.ended {
			w.queue = nil
			w.cond.Broadcast()
			return
		}
		next := w.queue[0]
		w.queue = w.queue[1:]
		w.busy = true
		w.mu.Unlock()
		next()
		w.mu.Lock()
		w.busy = false
		w.cond.Broadcast()
	}
}

func (w *fakeWatch) push(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue = append(w.queue, f)
	w.cond.Broadcast()
}

// notify reports a change; called with f.mu held, so events keep the
// order of the changes.
func (f *FakeLink) notify(p netip.Prefix, added bool) {
	if w := f.w; w != nil {
		w.mu.Lock()
		down := w.down
		w.mu.Unlock()
		if !down {
			w.push(func() { w.event(addrmgr.AddrEvent{Prefix: p, Added: added}) })
		}
	}
}

// Flush waits until every notification so far has been delivered.
func (f *FakeLink) Flush() {
	f.mu.Lock()
	w := f.w
	f.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for (len(w.queue) > 0 || w.busy) && !w.ended {
		w.cond.Wait()
	}
}

// Lose breaks the subscription as an overflowing receive buffer does: the
// watcher is told events were lost, and none is reported until Resume.
func (f *FakeLink) Lose(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.w; w != nil {
		w.mu.Lock()
		w.down = true
		w.mu.Unlock()
		w.push(func() { w.status(fmt.Errorf("%w: %w", addrmgr.ErrWatchLost, err)) })
	}
}

// Resume restores the subscription broken by Lose.
func (f *FakeLink) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.w; w != nil {
		w.mu.Lock()
		w.down = false
		w.mu.Unlock()
		w.push(func() { w.status(nil) })
	}
}

// NewFakeLink returns a device holding ps.
func NewFakeLink(ps ...netip.Prefix) *FakeLink {
	f := &FakeLink{addrs: map[netip.Prefix]bool{}}
	for _, p := range ps {
		f.addrs[p] = true
	}
	return f
}

// Put adds an address behind the manager's back, as an operator would
// (`ip addr add`).
func (f *FakeLink) Put(p netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.addrs[p] {
		f.addrs[p] = true
		f.notify(p, true)
	}
}

// Take removes an address behind the manager's back (`ip addr del`).
func (f *FakeLink) Take(p netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addrs[p] {
		delete(f.addrs, p)
		f.notify(p, false)
	}
}

// String lists the addresses, sorted, one per line.
func (f *FakeLink) String() string {
	var b strings.Builder
	for _, p := range f.Prefixes() {
		fmt.Fprintln(&b, p)
	}
	return b.String()
}

// Prefixes lists the addresses, sorted, without counting a dump.
func (f *FakeLink) Prefixes() []netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	ps := make([]netip.Prefix, 0, len(f.addrs))
	for p := range f.addrs {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, model.ComparePrefix)
	return ps
}

// Addrs implements Link.
func (f *FakeLink) Addrs() ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Dumps++
	out := make([]netip.Prefix, 0, len(f.addrs))
	for p := range f.addrs {
		out = append(out, p)
	}
	return out, nil
}

// AddAddr implements Link.
func (f *FakeLink) AddAddr(p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.OnAdd != nil {
		if err := f.OnAdd(p); err != nil {
			return err
		}
	}
	if !f.addrs[p] {
		f.addrs[p] = true
		f.Mutations++
		f.notify(p, true)
	}
	return nil
}

// AddAddrs implements Link with AddAddr for each.
func (f *FakeLink) AddAddrs(ps []netip.Prefix, each func(i int, err error)) {
	for i, p := range ps {
		each(i, f.AddAddr(p))
	}
}

// DelAddr implements Link.
func (f *FakeLink) DelAddr(p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addrs[p] {
		delete(f.addrs, p)
		f.Mutations++
		f.notify(p, false)
	}
	return nil
}
