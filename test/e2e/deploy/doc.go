// Package deploy tests the manifests under the repository's deploy/
// directory against the real kube-apiserver of package bed/apiserver,
// applied by package bed/deploy:
//
//   - every overlay passes server-side apply with dry-run=All and strict
//     field validation, without a warning;
//   - the ServiceAccount of the base, with its own bound token and only the
//     ClusterRole and Role the base ships, can make every API call
//     `ipvs-proxy run` makes (the proxy's own informers, Event recorder and
//     events Lease election do them), while each verb either role grants is
//     needed by at least one call and verbs the proxy never uses are
//     Forbidden.
//   - kubeadm v1.34's kube-proxy objects (KubeadmObjects, test data) and the
//     replace-kube-proxy overlay together: the overlay's pod, resolved as a
//     kubelet resolves it (ResolvePod: ConfigMap files, the ServiceAccount
//     token volume, env, host paths), runs kube-proxy's command line with
//     kube-proxy's files, and those files reach the API server with every
//     permission the proxy needs;
//   - with IPVS_PROXY_IMAGE (make test-image), that pod runs from the
//     image's root file system in the test VM on an nft node and a legacy
//     node (TestImage, TestImageGuest): it syncs, serves a ClusterIP and a
//     NodePort, and its iptables wrapper writes to the node's backend
//     without creating a table of the other.
package deploy
