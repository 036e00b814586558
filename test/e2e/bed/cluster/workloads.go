package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/endpoint"
	"k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/replication"
)

// Workloads are kube-controller-manager's controllers the upstream
// Service tests need beyond the bed's own: the endpoints controller (the
// legacy Endpoints some specs read), and the workload controllers they
// create their pods through: deployment,
// replicaset and replication (ReplicationControllers: the jig's
// serve-hostname services), the root CA publisher (the kube-root-ca.crt
// ConfigMap the e2e framework waits for in every test namespace) and
// the namespace controller (a deleted test namespace's pods go, so the
// agents stop their processes). The re-created tests make their pods themselves and do not
// need them.
type Workloads struct{ *inProcess }

// StartWorkloads starts them with cfg (an admin's) and rootCA (the API
// server's CA, PEM, published as kube-root-ca.crt) and returns once their
// informers have synced; Stop ends them.
func StartWorkloads(ctx context.Context, cfg *rest.Config, rootCA []byte) (*Workloads, error) {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("workload controllers: client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	core, apps := factory.Core().V1(), factory.Apps().V1()
	rs := replicaset.NewReplicaSetController(ctx, apps.ReplicaSets(), core.Pods(), client, replicaset.BurstReplicas)
	rc := replication.NewReplicationManager(ctx, core.Pods(), core.ReplicationControllers(), client, replication.BurstReplicas)
	dc, err := deployment.NewDeploymentController(ctx, apps.Deployments(), apps.ReplicaSets(), core.Pods(), client)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("workload controllers: deployment: %w", err)
	}
	ep := endpoint.NewEndpointController(ctx, core.Pods(), core.Services(), core.Endpoints(), client, 0)
	ca, err := rootcacertpublisher.NewPublisher(core.ConfigMaps(), core.Namespaces(), client, rootCA)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("workload controllers: root CA publisher: %w", err)
	}
	meta, err := metadata.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("workload controllers: metadata client: %w", err)
	}
	nsc := namespace.NewNamespaceController(ctx, client, meta, client.Discovery().ServerPreferredNamespacedResources,
		core.Namespaces(), 5*time.Minute, corev1.FinalizerKubernetes)
	if err := startInformers(ctx, factory, "workload controllers"); err != nil {
		cancel()
		return nil, err
	}
	return &Workloads{runLoops(ctx, cancel, factory, []func(context.Context){
		func(ctx context.Context) { ep.Run(ctx, workers) },
		func(ctx context.Context) { nsc.Run(ctx, workers) },
		func(ctx context.Context) { ca.Run(ctx, 1) },
		func(ctx context.Context) { rs.Run(ctx, workers) },
		func(ctx context.Context) { rc.Run(ctx, workers) },
		func(ctx context.Context) { dc.Run(ctx, workers) },
	})}, nil
}
