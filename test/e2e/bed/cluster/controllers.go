package cluster

import (
	"context"
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/controller/endpointslice"
	"k8s.io/kubernetes/pkg/controller/endpointslicemirroring"
	"k8s.io/kubernetes/pkg/controller/serviceaccount"
)

// Controller tuning, as kube-controller-manager's defaults
// (--max-endpoints-per-slice 100, --mirroring-max-endpoints-per-subset
// 1000) except the batch period: 0, so a Pod change reaches its
// EndpointSlice at once, as with the default of kube-controller-manager
// (--endpointslice-updates-batch-period is 0 unless set).
const (
	maxEndpointsPerSlice  = 100
	maxEndpointsPerSubset = 1000
	workers               = 2
)

// Controllers are kube-controller-manager's controllers a service proxy
// depends on, running in this process against one API server:
// endpointslice (Pods and Services to EndpointSlices, with ready, serving
// and terminating conditions and the node name), endpointslice-mirroring
// (custom Endpoints to EndpointSlices) and serviceaccount (the default
// ServiceAccount in every namespace).
type Controllers struct{ *inProcess }

// StartControllers starts the controllers with cfg (an admin's: they write
// EndpointSlices and ServiceAccounts in every namespace) and returns once
// their informers have synced. Stop ends them.
func StartControllers(ctx context.Context, cfg *rest.Config) (*Controllers, error) {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("controllers: client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	core, discovery := factory.Core().V1(), factory.Discovery().V1()

	slices := endpointslice.NewController(ctx, core.Pods(), core.Services(), core.Nodes(),
		discovery.EndpointSlices(), maxEndpointsPerSlice, client, 0)
	mirroring := endpointslicemirroring.NewController(ctx, core.Endpoints(), discovery.EndpointSlices(),
		core.Services(), maxEndpointsPerSubset, client, 0)
	accounts, err := serviceaccount.NewServiceAccountsController(core.ServiceAccounts(), core.Namespaces(),
		client, serviceaccount.DefaultServiceAccountsControllerOptions())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("controllers: serviceaccount: %w", err)
	}

	if err := startInformers(ctx, factory, "controllers"); err != nil {
		cancel()
		return nil, err
	}
	return &Controllers{runLoops(ctx, cancel, factory, []func(context.Context){
		func(ctx context.Context) { slices.Run(ctx, workers) },
		func(ctx context.Context) { mirroring.Run(ctx, workers) },
		func(ctx context.Context) { accounts.Run(ctx, workers) },
	})}, nil
}
