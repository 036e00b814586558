package addrmgr

import (
	"fmt"
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// The full sync's dump of kube-ipvs0 beside the sync: at scale the dump is
// a large part of what a periodic full sync holds the sync loop for once
// the IPVS table and the rules are read beside it (see
// BenchmarkReadbackFullSyncScale). BeginFull starts it and returns the
// read, which runs on another goroutine through its own socket
// (SetReader) while binds and unbinds go on; FullFrom (layer.go) then
// takes what it found, keeping the manager's own view of every address
// written meanwhile.

// Lister reads the device's addresses: Link's dump alone. A *kernel.Link
// on a second netlink handle (kernel.Link.Reader) is one.
type Lister interface {
	// Addrs dumps the device's addresses: `ip -o addr show dev kube-ipvs0`.
	Addrs() ([]netip.Prefix, error)
}

var _ Lister = Link(nil)

// SetReader makes BeginFull's read go through r, a second socket on the
// same device: a netlink socket serves one request at a time, so a dump
// on the manager's own would hold up its binds. Without one the read uses
// the manager's link.
func (m *Manager) SetReader(r Lister) { m.reader = r }

// BeginFull starts a dump of the device whose read runs off the syncing
// goroutine: it returns the read, to call once on any goroutine (it
// touches nothing of the manager), and from now on records every address
// the manager binds or unbinds. FullFrom then takes what the read found.
func (m *Manager) BeginFull() func() ([]netip.Prefix, error) {
	m.since = make(map[netip.Prefix]bool)
	m.dumpedInRead = false
	m.mu.Lock()
	m.readGen = m.gen
	m.mu.Unlock()
	var r Lister = m.link
	if m.reader != nil {
		r = m.reader
	}
	return func() ([]netip.Prefix, error) {
		// Sorted here, off the loop: FullFrom returns a dump that finds
		// the view unchanged as it is, instead of sorting the view.
		return addrsSorted(r)
	}
}

// dumpFrom is Dump with the device as the read BeginFull returned found
// it (FullFrom): an address bound or unbound since BeginFull may be in the
// read as it was before or after, so the manager's view of it is kept;
// every other one is compared as Dump compares, and what others changed
// is counted as drift. When a Dump ran since BeginFull (a partial sync
// that did not trust its view), that dump is newer than the read: the
// view stays as it left it, and no drift is counted twice. It ends the
// read.
func (m *Manager) dumpFrom(ps []netip.Prefix) ([]netip.Prefix, error) {
	if m.since == nil {
		return nil, fmt.Errorf("addrmgr: FullFrom without BeginFull: %w", layer.ErrNoRead)
	}
	since := m.since
	m.since = nil
	if m.dumpedInRead {
		m.drift = 0
		return m.Current(), nil
	}
	return m.replace(ps, since, m.readGen), nil
}

// wrote records that p is being bound or unbound, while a read is under
// way.
func (m *Manager) wrote(p netip.Prefix) {
	if m.since != nil {
		m.since[p] = true
	}
}
