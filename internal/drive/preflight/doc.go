// Package preflight owns the checks `ipvs-proxy run --init-only` makes
// before it says a node can be served: that the kernel has IPVS (loaded,
// built in, or a module modprobe can load) and that the API server, when it
// answers, accepts the credentials for the lists the proxy makes. Reading
// the configuration itself is internal/config's. Each check returns an
// error wrapping one of this package's sentinels, so that the command line
// maps it to its exit status.
package preflight
