// Package version holds the build's version string. It owns nothing else and
// never touches the kernel or the API server.
package version

// Version is set at build time by the Makefile:
//
//	-ldflags '-X github.com/ipvs-proxy/ipvs-proxy/internal/version.Version=v1.2.3'
//
// It is "dev" in a plain `go build` or `go test`.
var Version = "dev"
