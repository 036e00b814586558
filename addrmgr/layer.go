package addrmgr

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Desired is what the manager is asked to make kube-ipvs0 hold, as a
// layer.Layer: the service VIPs, as /32 and /128 prefixes.
type Desired struct {
	Addresses []netip.Prefix
}

var _ layer.Layer[Desired, []netip.Prefix, *Result] = (*Manager)(nil)

// The safe order splits the address layer's writes around the IPVS step
// (internal/drive/applier): an address leaves before its virtual servers, and
// comes only once they all exist. So Full, FullFrom and Partial read the
// device (Partial only when the view is not trusted: Refresh) and decide
// what leaves (Result.Unwanted); Remove unbinds it, and Bind binds, each
// in its step. Cleanup reads and unbinds.

// DriftAddress is the Drift kind of an address added to or removed from
// kube-ipvs0 by others.
const DriftAddress layer.Kind = "address"

// Full dumps the device (Dump) and decides what of it d does not want.
// The error is non-nil only when the device could not be read.
func (m *Manager) Full(d Desired) (*Result, error) {
	view, err := m.Dump()
	if err != nil {
		return nil, err
	}
	return m.decide(d, true, view), nil
}

// FullFrom is Full with the device as the read BeginFull returned found
// it (readback.go); layer.ErrNoRead when no read is under way. It syncs in
// one step: turn is never called.
func (m *Manager) FullFrom(d Desired, read []netip.Prefix, _ layer.Turn[Desired]) (*Result, error) {
	view, err := m.dumpFrom(read)
	if err != nil {
		return nil, err
	}
	return m.decide(d, true, view), nil
}

// Partial makes the view current (Refresh: a dump only when the watch
// does not vouch for it) and decides what of it d does not want.
func (m *Manager) Partial(d Desired) (*Result, error) {
	dumped, err := m.Refresh()
	if err != nil {
		return nil, err
	}
	return m.decide(d, dumped, nil), nil
}

// Cleanup removes every address from the device that Unbind(d.Addresses)
// would (for an empty cluster's d, all of them but what SetExclude leaves):
// one dump, then `ip addr del` per address. Its View is what was bound
// before. It is the address layer's share of `ipvs-proxy cleanup`; the
// device itself stays (kernel.DeleteDevice removes it). The error is
// non-nil only when the device could not be read.
func (m *Manager) Cleanup(d Desired) (*Result, error) {
	bound, err := m.Dump()
	if err != nil {
		return nil, err
	}
	res := m.Unbind(d.Addresses)
	res.Dumped, res.View = true, bound
	res.Drift.Add(DriftAddress, m.drift)
	return res, nil
}

// decide is the Result of a read: what d does not want, and the drift the
// read found (none when the view was trusted).
func (m *Manager) decide(d Desired, dumped bool, view []netip.Prefix) *Result {
	res := &Result{Dumped: dumped, View: view, Unwanted: m.Unwanted(d.Addresses)}
	res.Drift.Add(DriftAddress, m.drift)
	return res
}
