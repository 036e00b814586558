// Package kubeproxy runs the reference service proxy in the test bed:
// kube-proxy v1.34 (k8s.io/kubernetes v1.34.4, built once by
// scripts/build-k8s.sh into .cache/kube-proxy, `make kube-proxy`) in
// IPVS mode inside a ktest node namespace of the test VM, against the
// host's in-process API server, the way `ipvs-proxy run` runs there.
//
// It is configured as kubeadm configures it: a KubeProxyConfiguration file
// shaped like the kube-system/kube-proxy ConfigMap's config.conf (Config,
// Config.WriteFile) and the DaemonSet's command line, `kube-proxy
// --config=FILE --hostname-override=NODE` (Start). With --config,
// kube-proxy ignores every other flag but the logging ones and
// --hostname-override, so everything the bed needs is in the file; what
// differs from kubeadm's values, and why, is documented on Config.
//
// A Process answers the questions a takeover test asks: is it ready
// (Process.Healthz), has it synced and when (Process.LastSync,
// Process.WaitSync from kubeproxy_sync_proxy_rules_last_timestamp_seconds),
// what its metrics say (Process.Metrics), and it stops on SIGTERM as a
// DaemonSet rollout stops it (Process.Stop).
//
// It owns the process it starts and the files it writes; it never changes
// the kernel itself: what kube-proxy programs is the test's to judge.
package kubeproxy
