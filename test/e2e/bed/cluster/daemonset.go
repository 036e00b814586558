package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/kubernetes/pkg/controller/daemon"
)

// Failed daemon pods are deleted with a back-off from 1 s to 15 min, as
// kube-controller-manager's DaemonSet controller is started.
const (
	daemonFailedBackoffInitial = time.Second
	daemonFailedBackoffMax     = 15 * time.Minute
)

// DaemonSets is kube-controller-manager's DaemonSet controller
// (k8s.io/kubernetes v1.34.4) running in this process against one API
// server: a DaemonSet gets one pod per node its template tolerates (bound
// by kube-scheduler through the node affinity the controller writes), and
// a RollingUpdate replaces them within maxUnavailable (and maxSurge), as
// upstream's LoadBalancer rolling update specs (SN-42, SN-43) expect.
type DaemonSets struct{ *inProcess }

// StartDaemonSets starts the controller with cfg (an admin's: it creates
// and deletes Pods and ControllerRevisions in every namespace) and
// returns once its informers have synced; Stop ends it.
func StartDaemonSets(ctx context.Context, cfg *rest.Config) (*DaemonSets, error) {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("daemonset controller: client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	core, apps := factory.Core().V1(), factory.Apps().V1()
	dsc, err := daemon.NewDaemonSetsController(ctx, apps.DaemonSets(), apps.ControllerRevisions(), core.Pods(), core.Nodes(),
		client, flowcontrol.NewBackOff(daemonFailedBackoffInitial, daemonFailedBackoffMax))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("daemonset controller: %w", err)
	}
	if err := startInformers(ctx, factory, "daemonset controller"); err != nil {
		cancel()
		return nil, err
	}
	return &DaemonSets{runLoops(ctx, cancel, factory, []func(context.Context){
		func(ctx context.Context) { dsc.Run(ctx, workers) },
	})}, nil
}
