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
	// WebService is the Service, port WebPort (and WebNodePort when it is
	// a NodePort Service), whose backend is a CNI pod of AgnhostImage
	// listening on WebTargetPort.
	WebService    = "web"
	WebPort       = 80
	WebNodePort   = 30080
	WebTargetPort = 8080
)

// The guest's environment, set by TestNode.
const (
	EnvAdminKubeconfig = "NODE_KUBECONFIG_ADMIN" // admin kubeconfig, server https://10.0.2.100:PORT
	EnvKubelet         = "NODE_KUBELET_BIN"      // the kubelet binary
	// EnvImports lists the OCI layout tars to import, comma-separated,
	// each TAR or BASE=TAR (`ctr images import --base-name BASE`, for a
	// layout whose index names only a tag, as the release's does).
	EnvImports = "NODE_IMPORTS"
	// EnvRollout is the release image's new version, for the rollout.
	EnvRollout = "NODE_ROLLOUT"
	// EnvSwap is the release image, for kube-proxy's own DaemonSet.
	EnvSwap = "NODE_SWAP"
	// EnvHelm and EnvChart are the helm binary and charts/ipvs-proxy, for
	// the replace step as `helm install`.
	EnvHelm  = "NODE_HELM"
	EnvChart = "NODE_CHART"
)
