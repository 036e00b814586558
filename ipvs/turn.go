package ipvs

import "slices"

// Turn is a full sync's turn for the changes waiting beside it (the full
// sync in turns, docs/architecture.md): FullFrom calls it between two
// batches of desired virtual servers, and it applies the waiting changes
// with Partial, as any partial sync does. It returns the desired virtual
// servers as they are after them, sorted by CompareKeys, and the full sync
// goes on in that list after the last key it applied; nil means nothing
// was waiting, and the full sync goes on as it was.
//
// A change waits for at most one batch of the full sync's walk instead of
// the whole of it: at scale the walk alone holds the sync loop long
// enough to matter (BenchmarkChangeDuringFullSync).
type Turn func() []VirtualServer

// takeTurn runs turn inside the full sync numbered gen: what its partial
// syncs create or keep is wanted by that full sync, so its stale walk
// leaves them, wherever their keys fall in the desired list.
func (r *Reconciler) takeTurn(turn Turn, gen uint64) []VirtualServer {
	r.inTurn = gen
	defer func() { r.inTurn = 0 }()
	return turn()
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
