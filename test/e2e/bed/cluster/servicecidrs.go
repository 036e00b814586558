package cluster

import (
	"context"
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/controller/servicecidrs"
)

// ServiceCIDRs is kube-controller-manager's servicecidr controller
// (networking.k8s.io/v1 ServiceCIDR, `kubectl get servicecidrs`): it marks
// a new ServiceCIDR Ready, so the API server allocates cluster IPs from it
// beside --service-cluster-ip-range, and removes the finalizer of a
// deleted one once no IPAddress of it is left.
type ServiceCIDRs struct{ *inProcess }

// StartServiceCIDRs starts the controller with cfg (an admin's) and
// returns once its informers have synced; Stop ends it.
func StartServiceCIDRs(ctx context.Context, cfg *rest.Config) (*ServiceCIDRs, error) {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("servicecidr controller: client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	net := factory.Networking().V1()
	c := servicecidrs.NewController(ctx, net.ServiceCIDRs(), net.IPAddresses(), client)
	if err := startInformers(ctx, factory, "servicecidr controller"); err != nil {
		cancel()
		return nil, err
	}
	return &ServiceCIDRs{runLoops(ctx, cancel, factory, []func(context.Context){
		func(ctx context.Context) { c.Run(ctx, workers) },
	})}, nil
}
