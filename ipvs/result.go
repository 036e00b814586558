package ipvs

import (
	"fmt"
	"slices"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/layer"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

// Failure is one change the reconciler could not make.
type Failure struct {
	// Service is the service port of the virtual server; zero for one no
	// Service asks for any more.
	Service model.ServicePortName
	Key     Key
	Err     error
}

func (f Failure) Error() string {
	if f.Service.IsZero() {
		return fmt.Sprintf("virtual server %s: %v", f.Key, f.Err)
	}
	return fmt.Sprintf("service %s virtual server %s: %v", f.Service, f.Key, f.Err)
}

func (f Failure) Unwrap() error { return f.Err }

// Result counts what one sync changed and lists what failed.
type Result struct {
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
	// Drift counts, in a Full after the first, owned virtual servers that
	// were deleted, added or changed (attributes or real servers) outside
	// the proxy since the sync before: each is logged and then repaired.
	Drift    int
	Failures []Failure
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

// Err joins the failures, or is nil.
func (r *Result) Err() error { return layer.Join(r.Failures) }

// FailedServices lists the service ports with at least one failure,
// sorted (the zero one first, for failures of no service).
func (r *Result) FailedServices() []model.ServicePortName {
	var out []model.ServicePortName
	for _, f := range r.Failures {
		out = append(out, f.Service)
	}
	slices.SortFunc(out, model.ServicePortName.Compare)
	return slices.Compact(out)
}

func (r *Result) fail(service model.ServicePortName, k Key, err error) {
	r.Failures = append(r.Failures, Failure{Service: service, Key: k, Err: err})
}
