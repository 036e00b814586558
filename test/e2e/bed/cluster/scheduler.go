package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/profile"
)

// Scheduler is kube-scheduler (k8s.io/kubernetes v1.34.4, its default
// profile and plugins) running in this process against one API server: a
// Pod created without spec.nodeName is bound to a node, as the upstream
// e2e tests expect (their pods name no node unless a test pins them).
type Scheduler struct{ *inProcess }

// StartScheduler starts the scheduler with cfg (an admin's: it binds Pods
// and writes Events in every namespace) and returns once its informers
// and event handlers have synced. Stop ends it.
func StartScheduler(ctx context.Context, cfg *rest.Config) (*Scheduler, error) {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("scheduler: client: %w", err)
	}
	conf, err := latest.Default()
	if err != nil {
		return nil, fmt.Errorf("scheduler: default configuration: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	factory := scheduler.NewInformerFactory(client, 0)
	sched, err := scheduler.New(ctx, client, factory, nil, profile.NewRecorderFactory(broadcaster),
		scheduler.WithKubeConfig(rest.CopyConfig(cfg)),
		scheduler.WithProfiles(conf.Profiles...),
		scheduler.WithPercentageOfNodesToScore(conf.PercentageOfNodesToScore),
		scheduler.WithPodInitialBackoffSeconds(conf.PodInitialBackoffSeconds),
		scheduler.WithPodMaxBackoffSeconds(conf.PodMaxBackoffSeconds),
		scheduler.WithParallelism(conf.Parallelism))
	if err != nil {
		cancel()
		broadcaster.Shutdown()
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if err := startInformers(ctx, factory, "scheduler"); err != nil {
		cancel()
		broadcaster.Shutdown()
		return nil, err
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if err := sched.WaitForHandlersSync(syncCtx); err != nil {
		cancel()
		factory.Shutdown()
		broadcaster.Shutdown()
		return nil, fmt.Errorf("scheduler: event handlers did not sync in a minute: %w", err)
	}
	return &Scheduler{runLoops(ctx, cancel, factory, []func(context.Context){sched.Run}, broadcaster.Shutdown)}, nil
}
