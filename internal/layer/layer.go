// Package layer holds what the three kernel layers — the IPVS reconciler
// (ipvs), the kube-ipvs0 address manager (addrmgr) and the ipset and
// iptables syncer (iptables) — share with the applier that drives them, so
// that one contract reads the same in each: the error of a read beside the
// loop that a full sync made stale, and how a sync's failures become one
// error. It imports nothing of the project and touches no kernel.
package layer

import "errors"

// ErrNoRead is wrapped by a layer's FullFrom (DumpFrom) when there is no
// read to apply: none was begun, or a full sync ran since it began, so
// what it read is stale. The applier then syncs from a fresh read.
var ErrNoRead = errors.New("no read to apply")

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
