// Package docscheck holds tests that keep README.md and docs/ true to the
// code: the flags in docs/flags.md are exactly those of `ipvs-proxy run
// --help`, with the same types and defaults; README's Layout table names
// every package `go list ./...` finds outside test/, tools/ and deploy/,
// and its Documentation table every docs/*.md page;
// every relative link resolves to a file and, with an anchor, a heading;
// every test, benchmark and fuzz target the pages quote is declared, and
// every ipvs_proxy_* and kubeproxy_* metric they quote is registered by
// internal/metrics. It has no code of its own, builds the real binary in
// its tests, and never touches the kernel or an API server.
package docscheck
