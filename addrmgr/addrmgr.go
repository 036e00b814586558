package addrmgr

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Device is the dummy interface every service VIP is bound on.
const Device = "kube-ipvs0"

// Sentinel errors.
var (
	// ErrProtected is returned (wrapped) for an address the guard refuses.
	ErrProtected = errors.New("protected address")
	// ErrNotHost is returned for a prefix that is not a /32 or /128.
	ErrNotHost = errors.New("not a /32 or /128")
	// ErrNotDummy is returned when kube-ipvs0 exists but is not a dummy device.
	ErrNotDummy = errors.New("kube-ipvs0 exists and is not a dummy device")
	// ErrNotReady is Bind's failure for an address its ready function
	// refused: not all of its virtual servers exist.
	ErrNotReady = errors.New("its virtual servers are not all programmed")
)

// Protector is what the Manager asks immediately before each bind: the
// node-IP guard's verdict on an address (*guard.Guard, or the daemon's
// holder of the guard in force).
type Protector interface {
	Check(addr netip.Addr) guard.Verdict
}

var _ Protector = (*guard.Guard)(nil)

// Link is kube-ipvs0's address list. *kernel.Link (addrmgr/kernel) is the netlink
// implementation; *addrmgrtest.FakeLink the in-memory one for unit tests.
type Link interface {
	// Addrs dumps the device's addresses: `ip -o addr show dev kube-ipvs0`.
	Addrs() ([]netip.Prefix, error)
	// AddAddr is `ip addr add 10.96.0.10/32 dev kube-ipvs0`.
	AddAddr(p netip.Prefix) error
	// AddAddrs is AddAddr for each of ps, sent together where the link
	// can (the kernel's: many requests to a sendmsg, each acknowledged on
	// its own). It calls each with every address's outcome, in order.
	AddAddrs(ps []netip.Prefix, each func(i int, err error))
	// DelAddr is `ip addr del 10.96.0.10/32 dev kube-ipvs0`.
	DelAddr(p netip.Prefix) error
}

// Binding is what a Failure of the manager is about: an address, and
// whether it was being bound or unbound.
type Binding struct {
	Prefix netip.Prefix
	// Op is "bind" or "unbind".
	Op string
}

func (b Binding) String() string { return fmt.Sprintf("%s %s on %s", b.Op, b.Prefix, Device) }

// Failure is one address that could not be bound or unbound.
type Failure = layer.Failure[Binding]

// Result counts what a phase changed; its Result lists what failed and the
// drift (DriftAddress) the phase's read found. Refusals are not failures:
// they are the guard working.
type Result struct {
	layer.Result[Binding]
	Bound, Unbound int
	// Refused are desired addresses the guard refused; they are not bound.
	Refused []BindRefusal
	// Dumped says the device was read: always in Full, FullFrom and
	// Cleanup, in a Partial when the view was not trusted (Refresh).
	Dumped bool
	// View is the device's addresses after the read of Full or FullFrom,
	// sorted; Cleanup's are those bound before it. Nil in a Partial.
	View []netip.Prefix
	// Unwanted is what Full, FullFrom and Partial decided leaves the
	// device (Unwanted), for Remove to unbind.
	Unwanted []Unwanted
}

// BindRefusal is an address the guard would not let be bound at the moment
// of binding (model.Refusal is what the planner refused, before).
type BindRefusal struct {
	Prefix  netip.Prefix
	Reason  model.Reason
	Message string
}

// Manager (a layer.Layer, layer.go) binds and unbinds kube-ipvs0's
// addresses: it binds the service
// VIPs as /32 and /128 prefixes, checks every address against the node-IP
// guard immediately before binding it, and removes from kube-ipvs0 whatever
// is protected or not desired (everything on kube-ipvs0 is the proxy's). It
// never touches any other interface and never brings kube-ipvs0 up. It keeps
// the set found by the last dump, updated by its own changes, and — with
// Watch — follows the device between dumps, so that Refresh reads it only
// when someone else changed it. Its methods other than the watch's are not
// safe for concurrent use: one goroutine syncs.
type Manager struct {
	link  Link
	guard Protector
	log   *zap.Logger
	// exclude is --ipvs-exclude-cidrs: host addresses inside are left on
	// the device unless the guard protects them (SetExclude).
	exclude []netip.Prefix
	// cur is what the manager believes the device holds. Only the syncing
	// goroutine writes it, under mu; it reads it without.
	cur map[netip.Prefix]bool
	// dumped is set by the first Dump: from then on cur is what the
	// manager believes the device holds, and a Dump that finds otherwise
	// has found drift.
	dumped bool
	drift  int
	// reader, since, readGen and dumpedInRead are the read beside the
	// sync (readback.go): the Lister it dumps through (nil: link), the
	// prefixes written since it began (nil: no read under way), the
	// watch's generation then, and whether a Dump ran meanwhile.
	reader       Lister
	since        map[netip.Prefix]bool
	readGen      uint64
	dumpedInRead bool

	// lastDesired is the desired list of the last Unwanted or Bind, want
	// its set; bindDone says every one of lastDesired is in cur. lastGiven
	// is the caller's slice it was copied from: the same slice given again
	// is the same list without a comparison (callers never modify a passed
	// slice in place).
	lastDesired []netip.Prefix
	lastGiven   []netip.Prefix
	want        map[netip.Prefix]bool
	bindDone    bool
	// noneUnwanted: the last Unwanted, of lastDesired, found nothing to
	// remove; since then only addresses of lastDesired were added.
	noneUnwanted bool
	// checkedFP is the guard's fingerprint when every address in cur was
	// last checked against it (guardChecked); see Fingerprinter.
	checkedFP    uint64
	guardChecked bool

	// The watch's state, shared with its goroutine.
	mu sync.Mutex
	// live: a subscription reports every change; stale: it saw a change
	// by others or lost events since the last dump began; gen counts the
	// times the view went stale.
	live, stale bool
	gen         uint64
	// pending are the events awaited from the manager's own changes, per
	// prefix in the order made; nil when not watching.
	pending  map[netip.Prefix][]pending
	npending int
	seq      uint64
	kick     func()
	foreign  int
}

// NewManager returns a manager of link's addresses guarded by g; g must
// not be nil.
func NewManager(link Link, g Protector, log *zap.Logger) *Manager {
	if log == nil {
		log = zap.NewNop()
	}
	return &Manager{link: link, guard: g, log: log, cur: map[netip.Prefix]bool{}}
}

// SetExclude makes the manager leave on the device every /32 or /128
// inside cidrs (--ipvs-exclude-cidrs) that is not desired, as kube-proxy
// leaves what is there: the proxy plans nothing inside, and another agent
// may bind its own VIPs there. A protected address inside is removed all
// the same (the guard wins), and so is a wider prefix. Call it before the
// first Unwanted.
func (m *Manager) SetExclude(cidrs []netip.Prefix) {
	m.exclude = slices.Clone(cidrs)
	m.noneUnwanted = false
}

// excluded reports whether p is a host prefix inside an excluded CIDR.
func (m *Manager) excluded(p netip.Prefix) bool {
	if !isHost(p) {
		return false
	}
	a := p.Addr().WithZone("").Unmap()
	return slices.ContainsFunc(m.exclude, func(c netip.Prefix) bool { return c.Contains(a) })
}

// Dump reads the device's addresses once (one RTM_GETADDR dump, `ip -o
// addr show dev kube-ipvs0`) and returns them sorted; the manager's view is
// replaced by it. A full sync dumps whether or not the device is watched.
// A dump during a read beside the sync (BeginFull) is newer than that
// read: the FullFrom that follows keeps the view this one left.
func (m *Manager) Dump() ([]netip.Prefix, error) {
	m.mu.Lock()
	gen := m.gen
	m.mu.Unlock()
	ps, err := addrsSorted(m.link)
	if err != nil {
		return nil, err
	}
	if m.since != nil {
		m.dumpedInRead = true
	}
	return m.replace(ps, nil, gen), nil
}

// addrsSorted is `ip addr show dev kube-ipvs0`, sorted: the kernel lists
// the addresses in the order they were added.
func addrsSorted(l Lister) ([]netip.Prefix, error) {
	ps, err := l.Addrs()
	if err != nil {
		return nil, fmt.Errorf("ip addr show dev %s: %w", Device, err)
	}
	slices.SortFunc(ps, model.ComparePrefix)
	return ps, nil
}

// replace makes ps, a sorted dump (addrsSorted) begun when the watch's generation was gen, the
// manager's view, counting and logging what others changed since the view
// was last read; the prefixes in since keep the view's state (they were
// written while the dump ran, so the view is newer). It returns the view,
// sorted.
func (m *Manager) replace(ps []netip.Prefix, since map[netip.Prefix]bool, gen uint64) []netip.Prefix {
	// A dump that finds the view as it was (a periodic full sync's,
	// almost always) leaves it, and what was decided of it (every desired
	// address bound, every bound one checked against the guard),
	// standing: no new view, no 10,000 addresses checked again.
	unchanged := m.dumped && m.holds(ps, since)
	next := m.cur
	m.drift = 0
	if !unchanged {
		next = make(map[netip.Prefix]bool, len(ps))
		for _, p := range ps {
			next[p] = true
		}
		for p := range since {
			if m.cur[p] {
				next[p] = true
			} else {
				delete(next, p)
			}
		}
		if m.dumped {
			for p := range next {
				if !m.cur[p] {
					m.drift++
					m.log.Info("address added to "+Device+" outside the proxy", zap.Stringer("address", p))
				}
			}
			for p := range m.cur {
				if !next[p] {
					m.drift++
					m.log.Info("address removed from "+Device+" outside the proxy", zap.Stringer("address", p))
				}
			}
		}
		unchanged = m.dumped && m.drift == 0
	}
	m.mu.Lock()
	m.cur, m.dumped = next, true
	// What the watch saw while the dump ran may be newer than the dump:
	// the view stays stale then, and the next Refresh dumps again.
	if m.gen == gen {
		m.stale = false
	}
	m.mu.Unlock()
	if !unchanged {
		m.bindDone, m.guardChecked, m.noneUnwanted = false, false, false
	} else if len(since) == 0 {
		// ps is the view, and sorted.
		return ps
	}
	return m.Current()
}

// holds reports whether the view holds exactly ps, but for the prefixes
// in since, whose state is the view's anyway.
func (m *Manager) holds(ps []netip.Prefix, since map[netip.Prefix]bool) bool {
	n := 0
	for _, p := range ps {
		if since[p] {
			continue
		}
		if !m.cur[p] {
			return false
		}
		n++
	}
	for p := range since {
		if m.cur[p] {
			n++
		}
	}
	// A prefix listed twice makes n too large: compared the long way.
	return n == len(m.cur)
}

// Refresh makes the manager's view current for a sync and reports whether
// it had to dump the device for that: it dumps (as Dump) when the view was
// never read, when no live watch follows the device, or when the watch saw
// a change by others or lost events since the last dump; otherwise it
// trusts the view, and costs nothing.
func (m *Manager) Refresh() (dumped bool, err error) {
	m.mu.Lock()
	trust := m.dumped && m.live && !m.stale
	m.mu.Unlock()
	if trust {
		m.drift = 0
		return false, nil
	}
	if _, err := m.Dump(); err != nil {
		return false, err
	}
	return true, nil
}

// Current is the manager's view of the device's addresses, sorted.
func (m *Manager) Current() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m.cur))
	for p := range m.cur {
		out = append(out, p)
	}
	slices.SortFunc(out, model.ComparePrefix)
	return out
}

func isHost(p netip.Prefix) bool { return p.IsValid() && p.Bits() == p.Addr().BitLen() }

// Unwanted is an address on the device that Unbind would remove, and why.
type Unwanted struct {
	Prefix netip.Prefix
	// Why is "not desired", or "REASON: detail" for a protected address.
	Why string
}

// Fingerprinter is a Protector whose answers stay the same for as long as
// Fingerprint returns the same value (*guard.Guard). The manager then
// checks the addresses already bound against it only when the fingerprint
// changed or the device was dumped, instead of at every Unwanted; the
// addresses it binds itself are checked immediately before each bind
// either way.
type Fingerprinter interface {
	Fingerprint() uint64
}

// noteDesired remembers desired (and its set) when it differs from the
// last one, and reports whether it did. The planner hands on an unchanged
// address list as the very slice it gave before, so a partial sync that
// changes no address costs no comparison of 20,000 addresses.
func (m *Manager) noteDesired(desired []netip.Prefix) bool {
	if m.want != nil && (sameSlice(desired, m.lastGiven) || slices.Equal(desired, m.lastDesired)) {
		m.lastGiven = desired
		return false
	}
	m.lastGiven = desired
	m.lastDesired = slices.Clone(desired)
	m.noneUnwanted = false
	m.want = make(map[netip.Prefix]bool, len(desired))
	for _, p := range desired {
		m.want[p] = true
	}
	m.bindDone = false
	return true
}

// Unwanted lists, sorted and without changing anything, what
// Unbind(desired) would remove: every address on the device (as last
// dumped, updated by the manager's own changes) that is not desired (but
// for the excluded ones, SetExclude), is not a host prefix, or that the
// guard refuses — also a protected address put there by hand. Cost: one pass over the bound addresses (map lookups);
// the guard is asked about each only when it may answer differently than
// at the last pass (see Fingerprinter), and about each address removed.
// A caller must not modify a desired slice it passed in place: the same
// slice given again is taken as the same list (Bind too).
func (m *Manager) Unwanted(desired []netip.Prefix) []Unwanted {
	changed := m.noteDesired(desired)
	fp, fingerprinted := uint64(0), false
	if f, ok := m.guard.(Fingerprinter); ok {
		fp, fingerprinted = f.Fingerprint(), true
	}
	checkAll := !fingerprinted || !m.guardChecked || fp != m.checkedFP
	if !changed && !checkAll && m.noneUnwanted {
		// Nothing was added since the last pass found nothing to
		// remove but desired addresses the same guard allowed.
		return nil
	}
	var out []Unwanted
	for p := range m.cur {
		remove := !m.want[p] || !isHost(p)
		if !remove && !checkAll {
			continue
		}
		why := "not desired"
		if v := m.guard.Check(p.Addr()); v.Protected {
			remove, why = true, string(v.Reason)+": "+v.Detail
		} else if m.excluded(p) {
			remove = false
		}
		if remove {
			out = append(out, Unwanted{Prefix: p, Why: why})
		}
	}
	m.checkedFP, m.guardChecked = fp, fingerprinted
	m.noneUnwanted = len(out) == 0
	slices.SortFunc(out, func(a, b Unwanted) int { return model.ComparePrefix(a.Prefix, b.Prefix) })
	return out
}

// Unbind removes from the device everything Unwanted(desired) lists. Run it
// before the virtual servers of removed VIPs are deleted, so that a VIP
// never stays local without its virtual server.
func (m *Manager) Unbind(desired []netip.Prefix) *Result {
	return m.Remove(m.Unwanted(desired))
}

// Remove unbinds the given addresses (`ip addr del ADDR dev kube-ipvs0`),
// logging each with its reason.
func (m *Manager) Remove(unwanted []Unwanted) *Result {
	res := &Result{}
	for _, u := range unwanted {
		m.wrote(u.Prefix)
		id := m.expect(u.Prefix, false)
		if err := m.link.DelAddr(u.Prefix); err != nil {
			m.forget(u.Prefix, id)
			res.Fail(Binding{Prefix: u.Prefix, Op: "unbind"}, err)
			continue
		}
		m.setCur(u.Prefix, false)
		m.bindDone = false
		res.Unbound++
		m.log.Info("unbound address", zap.String("device", Device), zap.Stringer("address", u.Prefix), zap.String("why", u.Why))
	}
	return res
}

// Bound reports whether a is on the device as a host prefix (/32, /128),
// as far as the manager knows (the last dump and its own changes).
func (m *Manager) Bound(a netip.Addr) bool {
	return a.IsValid() && m.cur[netip.PrefixFrom(a, a.BitLen())]
}

// sameSlice reports whether a and b are the same slice: the same first
// element and length, and not nil.
func sameSlice(a, b []netip.Prefix) bool {
	return a != nil && b != nil && len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// bindBatch is how many addresses Bind checks and then binds together.
const bindBatch = 256

// Bind adds every desired address the device lacks, asking the guard about
// each immediately before binding it with the next few (bindBatch) in one
// AddAddrs; refused ones are reported and not bound. ready, when not nil, must say true for an address before it is
// bound (the applier passes "all of its virtual servers exist"). When the
// same desired addresses were all bound by the last Bind and none has gone
// since, it returns at once.
func (m *Manager) Bind(desired []netip.Prefix, ready func(netip.Addr) bool) *Result {
	res := &Result{}
	if !m.noteDesired(desired) && m.bindDone {
		return res
	}
	if f, ok := m.guard.(Fingerprinter); ok && m.guardChecked && f.Fingerprint() != m.checkedFP {
		// What this binds is checked against a guard the others were not.
		m.guardChecked = false
	}
	// Up to bindBatch addresses are checked, then bound together.
	batch := make([]netip.Prefix, 0, min(bindBatch, len(desired)))
	ids := make([]uint64, 0, cap(batch))
	flush := func() {
		m.link.AddAddrs(batch, func(i int, err error) {
			p := batch[i]
			if err != nil {
				m.forget(p, ids[i])
				res.Fail(Binding{Prefix: p, Op: "bind"}, err)
				return
			}
			m.setCur(p, true)
			res.Bound++
		})
		batch, ids = batch[:0], ids[:0]
	}
	for _, p := range desired {
		if m.cur[p] {
			continue
		}
		if !isHost(p) {
			res.Fail(Binding{Prefix: p, Op: "bind"}, ErrNotHost)
			continue
		}
		if ready != nil && !ready(p.Addr()) {
			res.Fail(Binding{Prefix: p, Op: "bind"}, ErrNotReady)
			continue
		}
		if v := m.guard.Check(p.Addr()); v.Protected {
			res.Refused = append(res.Refused, BindRefusal{Prefix: p, Reason: v.Reason, Message: v.Detail})
			m.log.Warn("refused to bind protected address", zap.String("device", Device), zap.Stringer("address", p), zap.String("reason", string(v.Reason)), zap.String("message", v.Detail))
			continue
		}
		m.wrote(p)
		batch = append(batch, p)
		ids = append(ids, m.expect(p, true))
		if len(batch) == bindBatch {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	m.bindDone = len(res.Failures) == 0 && len(res.Refused) == 0
	return res
}
