// Package health serves the proxy's /healthz and /livez (with kube-proxy's
// meaning) and the per-service healthCheckNodePort servers that load
// balancers probe for externalTrafficPolicy: Local. It only answers HTTP;
// it never touches the kernel's IPVS or address state.
package health

import (
	"context"
	"encoding/json"
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

	// Families are the IP families reported in the body's status (IPv4,
	// IPv6), as kube-proxy's per-family proxiers; set before serving.
	Families []string
	// OnAnswer, if set, is called with the path (/healthz or /livez) and
	// the status code of every answer (kube-proxy's proxy_healthz_total
	// and proxy_livez_total).
	OnAnswer func(path string, code int)

	mu           sync.RWMutex
	lastUpdated  time.Time
	oldestQueued time.Time // zero when nothing is pending
	nodeEligible bool
	// synced is set by the first Updated: /healthz is 503 until the first
	// full sync has applied, so that a rollout stops on a node whose proxy
	// never programmed anything (wrong RBAC, API address, node name).
	synced bool
}

// NewProxy returns the proxy's health with the given timeout; now may be
// nil for time.Now.
func NewProxy(timeout time.Duration, now func() time.Time) *Proxy {
	if now == nil {
		now = time.Now
	}
	return &Proxy{timeout: timeout, now: now, Families: []string{"IPv4"}}
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
	p.synced = true
}

// SyncNode records whether this node is eligible for traffic: its Node
// exists (until SyncNode sees it, it is not, as in kube-proxy), is not being
// deleted and is not tainted ToBeDeletedByClusterAutoscaler.
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

// ServiceProxyHealthy is what healthCheckNodePort answers report as
// serviceProxyHealthy: healthy, and the first full sync has applied.
func (p *Proxy) ServiceProxyHealthy() bool {
	h, _ := p.state()
	p.mu.RLock()
	defer p.mu.RUnlock()
	return h && p.synced
}

func (p *Proxy) state() (healthy bool, lastUpdated time.Time) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.oldestQueued.IsZero() || p.now().Sub(p.oldestQueued) < p.timeout {
		return true, p.lastUpdated
	}
	return false, p.lastUpdated
}

// Handler serves /healthz and /livez with kube-proxy 1.34's bodies
// (pkg/proxy/healthcheck's ProxyHealth): lastUpdated, currentTime,
// nodeEligible (/healthz only), healthy, and status per IP family. /healthz
// is 503 until the first full sync has applied, while the proxy is
// unhealthy, and while the node is not eligible; /livez only while the
// proxy is unhealthy. /proxyMode answers "ipvs", as kube-proxy's metrics
// server does (Handler's mux is mounted there too, see ProxyModeHandler).
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { p.serve(w, "/healthz") })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { p.serve(w, "/livez") })
	return mux
}

// familyHealth is one entry of the body's status.
type familyHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// body is kube-proxy 1.34's ProxyHealth.
type body struct {
	LastUpdated  time.Time               `json:"lastUpdated"`
	CurrentTime  time.Time               `json:"currentTime"`
	NodeEligible *bool                   `json:"nodeEligible,omitempty"`
	Healthy      bool                    `json:"healthy"`
	Status       map[string]familyHealth `json:"status,omitempty"`
}

func (p *Proxy) serve(w http.ResponseWriter, path string) {
	healthy, last := p.state()
	now := p.now()
	p.mu.RLock()
	eligible, synced := p.nodeEligible, p.synced
	p.mu.RUnlock()
	b := body{LastUpdated: last, CurrentTime: now, Healthy: healthy, Status: map[string]familyHealth{}}
	for _, f := range p.Families {
		b.Status[f] = familyHealth{LastUpdated: last, Healthy: healthy}
	}
	ok := healthy
	if path == "/healthz" {
		b.NodeEligible = &eligible
		ok = healthy && eligible && synced
	}
	code := http.StatusServiceUnavailable
	if ok {
		code = http.StatusOK
		// As kube-proxy: a healthy proxy reports lastUpdated as now.
		b.LastUpdated = now
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	out, _ := json.Marshal(b)
	_, _ = w.Write(out)
	if p.OnAnswer != nil {
		p.OnAnswer(path, code)
	}
}

// ProxyMode is what /proxyMode answers: the mode kube-proxy would report.
const ProxyMode = "ipvs"

// WithProxyMode adds kube-proxy's /proxyMode ("ipvs") to the metrics
// server's handler h.
func WithProxyMode(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, ProxyMode)
	})
	return mux
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
