package ipvs

import (
	"fmt"
	"slices"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
)

// Target is what a Failure of the reconciler is about: a virtual server
// and the service port that asked for it.
type Target struct {
	// Service is the service port of the virtual server; zero for one no
	// Service asks for any more.
	Service model.ServicePortName
	Key     Key
}

func (t Target) String() string {
	if t.Service.IsZero() {
		return fmt.Sprintf("virtual server %s", t.Key)
	}
	return fmt.Sprintf("service %s virtual server %s", t.Service, t.Key)
}

// Failure is one change the reconciler could not make.
type Failure = layer.Failure[Target]

// DriftVirtualServer is the Drift kind of an owned virtual server
// deleted, added or changed (attributes or real servers) outside the proxy.
const DriftVirtualServer layer.Kind = "virtual_server"

// Result counts what one sync changed; its Result lists what failed and,
// in a Full after the first, the drift (DriftVirtualServer): each is
// logged and then repaired.
type Result struct {
	layer.Result[Target]

	ServicesAdded, ServicesUpdated, ServicesDeleted          int
	RealServersAdded, RealServersUpdated, RealServersDeleted int
	// Quiesced counts TCP real servers set to weight 0 for graceful
	// termination.
	Quiesced int
	// ConntrackDeleted counts conntrack flushes for removed UDP/SCTP real
	// servers.
	ConntrackDeleted int
	// Conntrack is each family's flow deletions, IPv4 first.
	Conntrack [2]ConntrackRound
}

// ConntrackRound is one family's conntrack flow deletions in one sync:
// what kube-proxy's conntrack reconciler reports for one round
// (kubeproxy_conntrack_reconciler_*).
type ConntrackRound struct {
	// Ran says the sync deleted the flows of at least one real server of
	// the family (or tried to).
	Ran bool
	// Entries is the number of flows deleted.
	Entries int
	// Took is the time the deletions took.
	Took time.Duration
}

// Changes is the number of kernel changes the sync made.
func (r *Result) Changes() int {
	return r.ServicesAdded + r.ServicesUpdated + r.ServicesDeleted +
		r.RealServersAdded + r.RealServersUpdated + r.RealServersDeleted
}

// FailedServices lists the service ports with at least one failure,
// sorted (the zero one first, for failures of no service).
func (r *Result) FailedServices() []model.ServicePortName {
	var out []model.ServicePortName
	for _, f := range r.Failures {
		out = append(out, f.ID.Service)
	}
	slices.SortFunc(out, model.ServicePortName.Compare)
	return slices.Compact(out)
}

func (r *Result) fail(service model.ServicePortName, k Key, err error) {
	r.Fail(Target{Service: service, Key: k}, err)
}
