package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/informers"
)

// inProcess is a group of Kubernetes control loops (controllers, the
// scheduler) running in this process against one API server, with the
// informer factory they read. Stop ends them.
type inProcess struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Stop cancels the loops and waits for every one of them and for their
// informers.
func (p *inProcess) Stop() {
	p.cancel()
	<-p.done
}

// startInformers starts factory and waits up to a minute for its
// informers to sync; on failure it shuts the factory down and names the
// informer that did not sync.
func startInformers(ctx context.Context, factory informers.SharedInformerFactory, what string) error {
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for typ, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			factory.Shutdown()
			return fmt.Errorf("%s: %v informer did not sync in a minute", what, typ)
		}
	}
	return nil
}

// runLoops runs each loop in its own goroutine until ctx ends; once all
// have returned it shuts factory down, then runs each of after.
func runLoops(ctx context.Context, cancel context.CancelFunc, factory informers.SharedInformerFactory,
	loops []func(context.Context), after ...func()) *inProcess {
	p := &inProcess{cancel: cancel, done: make(chan struct{})}
	returned := make(chan struct{}, len(loops))
	for _, loop := range loops {
		go func() { loop(ctx); returned <- struct{}{} }()
	}
	go func() {
		for range loops {
			<-returned
		}
		factory.Shutdown()
		for _, f := range after {
			f()
		}
		close(p.done)
	}()
	return p
}
