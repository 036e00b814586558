// Package docscheck holds tests that keep README.md and docs/ true to the
// code: the flags in docs/flags.md are exactly those of `ipvs-proxy run
// --help`, with the same types and defaults; README's Layout table names
// every package `go list ./...` finds outside test/, tools/ and deploy/. It
// has no code of its own, builds the real binary in its tests, and never
// touches the kernel or an API server.
package docscheck
