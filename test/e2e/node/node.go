package node

// The bed's one real node and the Service it serves through the shipped
// DaemonSet's proxy.
const (
	// NodeName is the name the kubelet registers (--hostname-override).
	NodeName = "node-a"
	// NodeIP is the guest's address on its one NIC (vmtest's user network),
	// the kubelet's --node-ip and the hostNetwork pods' IP.
	NodeIP = "10.0.2.15"
	// PodCIDR is the node's pod range, handed to the CNI bridge plugin's
	// host-local IPAM; kubeadm's config.conf has clusterCIDR 10.244.0.0/16.
	PodCIDR = "10.244.0.0/24"

	// WebNamespace holds the backend pod and its ClusterIP Service.
	WebNamespace = "web"
	// WebService is the ClusterIP Service, port WebPort, whose backend is
	// a CNI pod of ServeImage listening on WebTargetPort.
	WebService    = "web"
	WebPort       = 80
	WebTargetPort = 8080
)

// The guest's environment, set by TestNode.
const (
	EnvAdminKubeconfig = "NODE_KUBECONFIG_ADMIN" // admin kubeconfig, server https://10.0.2.100:PORT
	EnvKubelet         = "NODE_KUBELET_BIN"      // the kubelet binary
	EnvReleaseImage    = "NODE_RELEASE_IMAGE"    // the release image's OCI layout tar
	EnvReleaseRepo     = "NODE_RELEASE_REPO"     // its repository, for `ctr images import --base-name`
	EnvTestImage       = "NODE_TEST_IMAGE"       // WriteTestImage's tar
	EnvWork            = "NODE_WORK"             // a host directory for the guest's files
)
