package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

// gcPeriod is how often the garbage collector asks discovery for new
// resource types and the RESTMapper forgets what it cached, as
// kube-controller-manager's 30 s.
const gcPeriod = 30 * time.Second

// GarbageCollector is kube-controller-manager's garbage collector
// (k8s.io/kubernetes v1.34.4) running in this process against one API
// server: an object whose owners (metadata.ownerReferences) are all gone
// is deleted, so a deleted Service's EndpointSlices and a deleted
// ReplicaSet's Pods go, and foreground and orphan deletion work as
// upstream e2e tests expect.
type GarbageCollector struct{ *inProcess }

// StartGarbageCollector starts the garbage collector with cfg (an admin's:
// it reads and deletes objects of every type) and returns once it watches
// every deletable resource type the API server lists and those watches
// have synced. Stop ends it.
func StartGarbageCollector(ctx context.Context, cfg *rest.Config) (*GarbageCollector, error) {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("garbage collector: client: %w", err)
	}
	meta, err := metadata.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("garbage collector: metadata client: %w", err)
	}
	// Two discovery clients, as kube-controller-manager: resetting the
	// RESTMapper's cache must not reset the one Sync compares with.
	mapperDiscovery, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("garbage collector: discovery client: %w", err)
	}
	syncDiscovery, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("garbage collector: discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(mapperDiscovery))

	ctx, cancel := context.WithCancel(ctx)
	// Typed informers where client-go has them, metadata-only ones for
	// the rest (custom resources), started by the GC's own monitors once
	// informersStarted is closed.
	factory := informers.NewSharedInformerFactory(client, 0)
	metaFactory := metadatainformer.NewSharedInformerFactory(meta, 0)
	informersStarted := make(chan struct{})
	gc, err := garbagecollector.NewGarbageCollector(ctx, client, meta, mapper,
		garbagecollector.DefaultIgnoredResources(), informerfactory.NewInformerFactory(factory, metaFactory), informersStarted)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("garbage collector: %w", err)
	}
	p := runLoops(ctx, cancel, factory, []func(context.Context){
		func(ctx context.Context) { gc.Run(ctx, workers, gcPeriod) },
		func(ctx context.Context) { gc.Sync(ctx, syncDiscovery, gcPeriod) },
		func(ctx context.Context) {
			wait.UntilWithContext(ctx, func(context.Context) { mapper.Reset() }, gcPeriod)
		},
	}, metaFactory.Shutdown)
	close(informersStarted)

	logger := klog.FromContext(ctx)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return gc.IsSynced(logger), nil
	}); err != nil {
		p.Stop()
		return nil, fmt.Errorf("garbage collector: its monitors did not sync in a minute: %w", err)
	}
	return &GarbageCollector{p}, nil
}
