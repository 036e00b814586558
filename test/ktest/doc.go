// Package ktest builds throwaway network topologies for kernel tests (files
// `*_kernel_test.go`, `//go:build kernel`, run as root in the test VM by
// test/vmtest/cmd/vmrun): a fresh network namespace playing the node
// (NewNode), pods as namespaces joined to it by veth pairs, each running TCP,
// UDP and SCTP backends that answer with their name and the peer address they
// saw (Node.AddPod, Pod.Listen), clients on the node's LAN for NodePort and
// externalIP traffic (Node.AddClient), IPv4 and IPv6 throughout, and the
// means to act inside a namespace (NS.Do, NS.Exec, NS.RunInput) and to send
// requests from it (NS.Request, NS.MustRequest, NS.Hits).
//
// It owns only the namespaces, links and sockets it creates, and removes them
// at t.Cleanup; it never touches the root namespace beyond loading kernel
// modules. It fails (never skips) a test that is not root or whose kernel
// lacks IPVS. It imports nothing of the proxy, so every package's in-package
// tests can use it; readers of the kernel state in `ipvs-proxy plan`'s text
// form are in test/ktest/kstate. See docs/testing.md.
package ktest
