package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaseName is the coordination.k8s.io Lease, in the proxy's namespace,
// whose holder reports the cluster-scoped refusals
// (`kubectl -n ipvs-proxy get lease ipvs-proxy-events`).
const LeaseName = "ipvs-proxy-events"

// Default election timings. Every node is a candidate, and a candidate
// reads the Lease once per RetryPeriod: at 5,000 nodes about 170 GETs of
// one small object a second, a third of what the kubelets' own Lease
// renewals cost. A holder that dies is replaced within LeaseDuration plus
// RetryPeriod (90 s at most); one that stops cleanly releases the Lease.
const (
	DefaultLeaseDuration = 60 * time.Second
	DefaultRenewDeadline = 45 * time.Second
	DefaultRetryPeriod   = 30 * time.Second
)

// ErrNoNamespace is returned by LeaseNamespace when no namespace is known.
var ErrNoNamespace = errors.New("no namespace for the events Lease")

// serviceAccountNamespace is where a pod's service account namespace is
// mounted.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// LeaseNamespace is the namespace of the events Lease: flag when set,
// else $POD_NAMESPACE, else the pod's service account namespace.
func LeaseNamespace(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns, nil
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns, nil
		}
	}
	return "", ErrNoNamespace
}

// Election is how the reporter of cluster-scoped refusals is chosen: the
// holder of Lease LeaseName in Namespace.
type Election struct {
	Client kubernetes.Interface
	// Namespace of the Lease.
	Namespace string
	// Identity is this candidate's holder identity: its node name.
	Identity string
	// Timings; zero means the Default ones.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// KeepOnStop leaves the Lease held when ctx ends, as a holder that
	// dies does (tests of the failover); by default it is released.
	KeepOnStop bool
}

// Elect runs the election until ctx ends: while this candidate holds the
// Lease, e reports cluster-scoped refusals (SetLeading). After losing the
// Lease it stands again. It returns ctx's error, or a configuration
// error at once.
func (e *Refusals) Elect(ctx context.Context, el Election, log *zap.Logger) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, el.Namespace, LeaseName,
		el.Client.CoreV1(), el.Client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: el.Identity})
	if err != nil {
		return fmt.Errorf("events Lease %s/%s: %w", el.Namespace, LeaseName, err)
	}
	cfg := leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            LeaseName,
		LeaseDuration:   cmp.Or(el.LeaseDuration, DefaultLeaseDuration),
		RenewDeadline:   cmp.Or(el.RenewDeadline, DefaultRenewDeadline),
		RetryPeriod:     cmp.Or(el.RetryPeriod, DefaultRetryPeriod),
		ReleaseOnCancel: !el.KeepOnStop,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				log.Info("reporting the cluster's node-independent refusals as Events", zap.String("lease", el.Namespace+"/"+LeaseName))
				e.SetLeading(true)
			},
			OnStoppedLeading: func() {
				e.SetLeading(false)
			},
			OnNewLeader: func(identity string) {
				if identity != el.Identity {
					log.Info("node-independent refusals are reported by another node", zap.String("reporter", identity))
				}
			},
		},
	}
	le, err := leaderelection.NewLeaderElector(cfg)
	if err != nil {
		return fmt.Errorf("events Lease %s/%s: %w", el.Namespace, LeaseName, err)
	}
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	return ctx.Err()
}
