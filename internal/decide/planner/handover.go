package planner

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// A virtual server two Services ask for (an externalIP one shares with
// another's, say) is the winner's; the others' claims wait, refused as
// duplicates. When the winner lets it go — its Service changed or was
// deleted — the next claim wins it: a Service that did not change now
// owns a virtual server, and a partial sync that applies the changed
// Services alone would delete the loser's old one and never create the
// new winner's. TakeHandedOver names those Services, so that the sync
// applies them too.

// handOver notes that Service n won a key another Service held.
func (inc *Incremental) handOver(n types.NamespacedName) {
	if inc.handedOver == nil {
		inc.handedOver = map[types.NamespacedName]bool{}
	}
	inc.handedOver[n] = true
}

// TakeHandedOver returns, sorted, the Services that won a virtual server
// another Service held since the last call, and forgets them: a partial
// sync applies them with the changed Services. Winners are picked again
// by State: call it after State.
func (inc *Incremental) TakeHandedOver() []types.NamespacedName {
	if len(inc.handedOver) == 0 {
		return nil
	}
	out := slices.SortedFunc(maps.Keys(inc.handedOver), model.CompareServices)
	inc.handedOver = nil
	return out
}
