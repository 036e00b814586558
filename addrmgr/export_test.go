package addrmgr

import "net/netip"

// Exported for the external tests (package addrmgr_test), which use
// addrmgrtest's link and so cannot live inside this package.

const BindBatch = bindBatch

// The manager's watch internals, seen from the external tests.

func (m *Manager) SetLink(l Link)                           { m.link = l }
func (m *Manager) Expect(p netip.Prefix, added bool) uint64 { return m.expect(p, added) }
func (m *Manager) SetCur(p netip.Prefix, bound bool)        { m.setCur(p, bound) }
func (m *Manager) OnEvent(e AddrEvent)                      { m.onEvent(e) }
func (m *Manager) Pending(p netip.Prefix) int               { return len(m.pending[p]) }

// Drift is how many addresses the last read found changed by others: the
// Drift of its Result, for the tests that read through Dump and Refresh.
func (m *Manager) Drift() int { return m.drift }

// DumpFrom is FullFrom's read alone: the view it leaves.
func (m *Manager) DumpFrom(ps []netip.Prefix) ([]netip.Prefix, error) { return m.dumpFrom(ps) }
