package metrics

import (
	"net/http"
	"net/http/pprof"
)

// WithProfiling serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/ beside next, which serves every other path: what
// --profiling adds to the metrics server, as kube-proxy's enableProfiling
// does. `go tool pprof http://ADDR/debug/pprof/heap` reads the live heap;
// /debug/pprof/profile?seconds=N samples the CPU for N seconds.
func WithProfiling(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
