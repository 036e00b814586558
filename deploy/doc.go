// Package deploy holds the kustomize manifests (base/, overlays/) and the
// image's files (image/). Its Go code is tests only: the shipped config
// files load with the proxy's own loader and agree with the DaemonSet. The
// manifests are applied to a real API server by test/e2e/deploy. Nothing
// here touches the kernel or a cluster.
package deploy
