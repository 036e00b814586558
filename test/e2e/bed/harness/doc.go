// Package harness holds what every end-to-end suite of test/e2e shares to run
// the proxy: WaitFor and WaitUntil, the one way a test polls for a
// condition, and StartProxy, the one way a test runs `ipvs-proxy run` in a
// ktest node namespace of the VM.
//
// Its siblings under bed/ are the rest of the test bed: the in-process
// kube-apiserver (apiserver), the deploy/ manifests applied to it (deploy),
// the multi-node cluster's controllers, scheduler, DNS and node agent
// (cluster), the one-node bed with a churner and the plan comparison of
// the chaos test and the daemon soak (churn), kube-proxy's build and process
// (kubeproxy), the builds of the binaries the VM runs (gobuild), a
// package's guest half run in the VM (guest), profiles carried out over the
// console (consoleprof) and `ipvs-proxy plan`'s input (planinput). The
// suites beside bed/ test the proxy with them; the bed owns no test of the
// proxy itself.
package harness
