package ipvs

import "github.com/ipvs-proxy/ipvs-proxy/internal/layer"

// Desired is what the reconciler is asked to make the IPVS table hold, as
// a layer.Layer: the desired virtual servers, sorted by CompareKeys as a
// planner's state is, and, for a full sync and a cleanup, the ownership
// rule; for a partial sync, the changed services.
type Desired struct {
	VirtualServers []VirtualServer
	// Own decides which virtual servers of the table are ours (Full,
	// FullFrom, Cleanup).
	Own Ownership
	// Changed are the services a Partial applies (Reconciler.Partial).
	Changed Changed
}

var _ layer.Layer[Desired, *Dump, *Result] = (*Reconciler)(nil)

// Cleanup deletes every virtual server the ownership rule (d.Own) or the
// journal calls ours, and nothing else: a Full of an empty desired state,
// one dump. Foreign virtual servers and --ipvs-exclude-cidrs stay.
func (r *Reconciler) Cleanup(d Desired) (*Result, error) { return r.Full(Desired{Own: d.Own}) }
