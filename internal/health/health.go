// Package health serves the proxy's /healthz and /livez (with kube-proxy's
// meaning) and the per-service healthCheckNodePort servers that load
// balancers probe for externalTrafficPolicy: Local. It only answers HTTP;
// it never touches the kernel's IPVS or address state.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ToBeDeletedTaint is the cluster autoscaler's taint on a node it is about
// to delete; /healthz then fails so load balancers drain the node, as
// kube-proxy does.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// Proxy is the proxy's health as kube-proxy's ProxyHealthServer defines it:
// healthy unless a change has been queued for longer than the timeout
// (kube-proxy uses 2 × --sync-period) without a successful sync since.
// /healthz is additionally unhealthy while this node is being deleted;
// /livez ignores the node.
type Proxy struct {
	timeout time.Duration
	now     func() time.Time

	mu           sync.RWMutex
	lastUpdated  time.Time
	oldestQueued time.Time // zero when nothing is pending
	nodeEligible bool
}

// NewProxy returns the proxy's health with the given timeout; now may be
// nil for time.Now.
func NewProxy(timeout time.Duration, now func() time.Time) *Proxy {
	if now == nil {
		now = time.Now
	}
	return &Proxy{timeout: timeout, now: now, nodeEligible: true}
}

// QueuedUpdate records that a change is waiting to be applied. Only the
// oldest pending change counts.
func (p *Proxy) QueuedUpdate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oldestQueued.IsZero() {
		p.oldestQueued = p.now()
	}
}

// Updated records a successful sync: nothing is pending any more.
func (p *Proxy) Updated() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.oldestQueued = time.Time{}
	p.lastUpdated = p.now()
}

// SyncNode records whether this node is eligible for traffic: not being
// deleted and not tainted ToBeDeletedByClusterAutoscaler.
func (p *Proxy) SyncNode(n *corev1.Node) {
	eligible := n != nil && n.DeletionTimestamp.IsZero()
	if n != nil {
		for _, t := range n.Spec.Taints {
			if t.Key == ToBeDeletedTaint {
				eligible = false
			}
		}
	}
	p.mu.Lock()
	p.nodeEligible = eligible
	p.mu.Unlock()
}

// Healthy reports the proxy's own health (the /livez answer).
func (p *Proxy) Healthy() bool {
	h, _ := p.state()
	return h
}

func (p *Proxy) state() (healthy bool, lastUpdated time.Time) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.oldestQueued.IsZero() || p.now().Sub(p.oldestQueued) < p.timeout {
		return true, p.lastUpdated
	}
	return false, p.lastUpdated
}

func (p *Proxy) eligible() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.nodeEligible
}

// Handler serves /healthz and /livez. The body is kube-proxy's:
// {"lastUpdated": ..., "currentTime": ..., "nodeEligible": ...}.
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { p.serve(w, true) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { p.serve(w, false) })
	return mux
}

func (p *Proxy) serve(w http.ResponseWriter, withNode bool) {
	healthy, last := p.state()
	now := p.now()
	eligible := p.eligible()
	if withNode {
		healthy = healthy && eligible
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if healthy {
		// As kube-proxy: a healthy proxy reports lastUpdated as now.
		last = now
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if withNode {
		fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q, "nodeEligible": %v}`, last, now, eligible)
		return
	}
	fmt.Fprintf(w, `{"lastUpdated": %q,"currentTime": %q}`, last, now)
}

// Serve runs handler on addr until ctx ends. An empty addr serves nothing.
func Serve(ctx context.Context, addr string, handler http.Handler) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return serveListener(ctx, ln, handler)
}

func serveListener(ctx context.Context, ln net.Listener, handler http.Handler) error {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
		case <-done:
		}
	}()
	err := srv.Serve(ln)
	close(done)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
