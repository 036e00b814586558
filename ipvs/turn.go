package ipvs

import (
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// A full sync's turn (layer.Turn, the full sync in turns,
// docs/architecture.md) comes between two batches of desired virtual
// servers: it applies the waiting changes with Partial, as any partial
// sync does, and returns the desired state as it is after them, its
// virtual servers sorted by CompareKeys; the full sync goes on in that
// list after the last key it applied. A change waits for at most one
// batch of the full sync's walk instead of the whole of it: at scale the
// walk alone holds the sync loop long enough to matter
// (BenchmarkChangeDuringFullSync).

// takeTurn runs turn inside the full sync numbered gen: what its partial
// syncs create or keep is wanted by that full sync, so its stale walk
// leaves them, wherever their keys fall in the desired list. It returns
// the desired virtual servers after the turn; false: nothing was waiting.
func (r *Reconciler) takeTurn(turn layer.Turn[Desired], gen uint64) ([]VirtualServer, bool) {
	r.inTurn = gen
	defer func() { r.inTurn = 0 }()
	d, ok := turn()
	return d.VirtualServers, ok
}

// resumeAfter is where a full sync's walk goes on in desired, sorted by
// CompareKeys, once it applied every key up to last: the first key after
// it. Keys before it that the turn added were applied by the turn's
// partial sync.
func resumeAfter(desired []VirtualServer, last Key) int {
	i, found := slices.BinarySearchFunc(desired, last, func(vs VirtualServer, k Key) int { return CompareKeys(vs.Key, k) })
	if found {
		i++
	}
	return i
}
