package addrmgr

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
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
)

// Protector is what the Manager asks immediately before each bind: Check
// reports whether addr must never be bound on kube-ipvs0 (protected true),
// with the reason code and a human-readable detail.
//
// Beware: *Guard has a method of the same signature with the opposite
// meaning (Guard.Check's third result is "allowed"), so a *Guard satisfies
// this interface structurally. NewManager therefore turns a *Guard it is
// given into Guard.Protector(); other implementations must answer
// "protected".
type Protector interface {
	Check(addr netip.Addr) (reason model.Reason, detail string, protected bool)
}

// guardProtector is a *Guard as a Protector: "protected" is "not allowed".
type guardProtector struct{ g *Guard }

func (p guardProtector) Check(addr netip.Addr) (model.Reason, string, bool) {
	reason, detail, allowed := p.g.Check(addr)
	return reason, detail, !allowed
}

// Protector returns the guard as a Protector (protected = not allowed).
func (g *Guard) Protector() Protector { return guardProtector{g} }

// Link is kube-ipvs0's address list. *KernelLink is the netlink
// implementation; *FakeLink the in-memory one for unit tests.
type Link interface {
	// Addrs dumps the device's addresses: `ip -o addr show dev kube-ipvs0`.
	Addrs() ([]netip.Prefix, error)
	// AddAddr is `ip addr add 10.96.0.10/32 dev kube-ipvs0`.
	AddAddr(p netip.Prefix) error
	// DelAddr is `ip addr del 10.96.0.10/32 dev kube-ipvs0`.
	DelAddr(p netip.Prefix) error
}

// Failure is one address that could not be bound or unbound.
type Failure struct {
	Prefix netip.Prefix
	// Op is "bind" or "unbind".
	Op  string
	Err error
}

func (f Failure) Error() string {
	return fmt.Sprintf("%s %s on %s: %v", f.Op, f.Prefix, Device, f.Err)
}

func (f Failure) Unwrap() error { return f.Err }

// Result counts what a phase changed and lists what failed.
type Result struct {
	Bound, Unbound int
	// Refused are desired addresses the guard refused; they are not bound.
	Refused  []Refusal
	Failures []Failure
}

// Refusal is an address the guard would not let be bound.
type Refusal struct {
	Prefix  netip.Prefix
	Reason  model.Reason
	Message string
}

// Err joins the failures (refusals are not errors: they are the guard
// working), or is nil.
func (r *Result) Err() error {
	errs := make([]error, len(r.Failures))
	for i, f := range r.Failures {
		errs[i] = f
	}
	return errors.Join(errs...)
}

// Manager binds and unbinds kube-ipvs0's addresses: it binds the service
// VIPs as /32 and /128 prefixes, checks every address against the node-IP
// guard immediately before binding it, and removes from kube-ipvs0 whatever
// is protected or not desired (everything on kube-ipvs0 is the proxy's). It
// never touches any other interface and never brings kube-ipvs0 up. It keeps
// the set found by the last dump, updated by its own changes. Not safe for
// concurrent use.
type Manager struct {
	link  Link
	guard Protector
	log   *zap.Logger
	cur   map[netip.Prefix]bool
	// dumped is set by the first Dump: from then on cur is what the
	// manager believes the device holds, and a Dump that finds otherwise
	// has found drift.
	dumped bool
	drift  int
}

// NewManager returns a manager of link's addresses guarded by guard; guard
// must not be nil. A *Guard is used through Guard.Protector.
func NewManager(link Link, guard Protector, log *zap.Logger) *Manager {
	if log == nil {
		log = zap.NewNop()
	}
	if g, ok := guard.(*Guard); ok {
		guard = g.Protector()
	}
	return &Manager{link: link, guard: guard, log: log, cur: map[netip.Prefix]bool{}}
}

// Dump reads the device's addresses once (one RTM_GETADDR dump) and
// returns them sorted; the manager's view is replaced by it.
func (m *Manager) Dump() ([]netip.Prefix, error) {
	ps, err := m.link.Addrs()
	if err != nil {
		return nil, fmt.Errorf("ip addr show dev %s: %w", Device, err)
	}
	next := make(map[netip.Prefix]bool, len(ps))
	for _, p := range ps {
		next[p] = true
	}
	m.drift = 0
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
	m.cur, m.dumped = next, true
	return m.Current(), nil
}

// Drift is how many addresses the last Dump found added to or removed from
// the device by others since the manager last saw it; the sync that
// follows the Dump repairs them.
func (m *Manager) Drift() int { return m.drift }

// Current is the manager's view of the device's addresses, sorted.
func (m *Manager) Current() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m.cur))
	for p := range m.cur {
		out = append(out, p)
	}
	slices.SortFunc(out, comparePrefix)
	return out
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func isHost(p netip.Prefix) bool { return p.IsValid() && p.Bits() == p.Addr().BitLen() }

// Unwanted is an address on the device that Unbind would remove, and why.
type Unwanted struct {
	Prefix netip.Prefix
	// Why is "not desired", or "REASON: detail" for a protected address.
	Why string
}

// Unwanted lists, without changing anything, what Unbind(desired) would
// remove: every address on the device (as last dumped, updated by the
// manager's own changes) that is not desired, is not a host prefix, or that
// the guard refuses — also a protected address put there by hand.
func (m *Manager) Unwanted(desired []netip.Prefix) []Unwanted {
	want := make(map[netip.Prefix]bool, len(desired))
	for _, p := range desired {
		want[p] = true
	}
	var out []Unwanted
	for _, p := range m.Current() {
		why := "not desired"
		remove := !want[p] || !isHost(p)
		if reason, msg, protected := m.guard.Check(p.Addr()); protected {
			remove, why = true, string(reason)+": "+msg
		}
		if remove {
			out = append(out, Unwanted{Prefix: p, Why: why})
		}
	}
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
		if err := m.link.DelAddr(u.Prefix); err != nil {
			res.Failures = append(res.Failures, Failure{Prefix: u.Prefix, Op: "unbind", Err: err})
			continue
		}
		delete(m.cur, u.Prefix)
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

// Bind adds every desired address the device lacks, asking the guard about
// each immediately before binding it; refused ones are reported and not
// bound. ready, when not nil, must say true for an address before it is
// bound (the applier passes "all of its virtual servers exist").
func (m *Manager) Bind(desired []netip.Prefix, ready func(netip.Addr) bool) *Result {
	res := &Result{}
	for _, p := range desired {
		if m.cur[p] {
			continue
		}
		if !isHost(p) {
			res.Failures = append(res.Failures, Failure{Prefix: p, Op: "bind", Err: ErrNotHost})
			continue
		}
		if ready != nil && !ready(p.Addr()) {
			res.Failures = append(res.Failures, Failure{Prefix: p, Op: "bind", Err: errors.New("its virtual servers are not all programmed")})
			continue
		}
		if reason, msg, protected := m.guard.Check(p.Addr()); protected {
			res.Refused = append(res.Refused, Refusal{Prefix: p, Reason: reason, Message: msg})
			m.log.Warn("refused to bind protected address", zap.String("device", Device), zap.Stringer("address", p), zap.String("reason", string(reason)), zap.String("message", msg))
			continue
		}
		if err := m.link.AddAddr(p); err != nil {
			res.Failures = append(res.Failures, Failure{Prefix: p, Op: "bind", Err: err})
			continue
		}
		m.cur[p] = true
		res.Bound++
	}
	return res
}
