package cluster

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Node capacity the bed announces: what kube-scheduler's NodeResourcesFit
// counts pods and requests against (a node with no allocatable "pods" fits
// none). The figures are a small kubelet's defaults, not the VM's.
var nodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("4"),
	corev1.ResourceMemory:           resource.MustParse("8Gi"),
	corev1.ResourcePods:             resource.MustParse("110"),
	corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
}

// NodeObject is the Node a bed node registers, as kubelet would: its
// hostname label, pod CIDR, InternalIP and Hostname addresses, capacity,
// the Ready condition, and, when kubeletPort is not zero, the port of the
// kubelet API it serves (status.daemonEndpoints.kubeletEndpoint, where the
// API server sends exec, logs and port-forward).
func NodeObject(name, ip, podCIDR string, kubeletPort int32) *corev1.Node {
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status: corev1.NodeStatus{
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
			Capacity:    nodeCapacity.DeepCopy(),
			Allocatable: nodeCapacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", Message: "bed node agent is posting ready status",
				LastHeartbeatTime: now, LastTransitionTime: now}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubeletPort}},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64",
				KubeletVersion: "v1.34.4", KubeProxyVersion: "v1.34.4", ContainerRuntimeVersion: "bed://v1"},
		},
	}
}

// RegisterNode creates node, then removes the not-ready NoSchedule taint
// the API server's NodeTaint admission put on it: the node lifecycle
// controller does that once a node reports Ready, and the bed runs no
// such controller (it would mark the agents' nodes NotReady for want of
// kubelet leases). Without it kube-scheduler binds no Pod.
func RegisterNode(ctx context.Context, client kubernetes.Interface, node *corev1.Node) (*corev1.Node, error) {
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("register node %s: %w", node.Name, err)
	}
	var kept []corev1.Taint
	for _, t := range created.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(created.Spec.Taints) {
		return created, nil
	}
	created.Spec.Taints = kept
	updated, err := client.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("register node %s: remove taint %s: %w", node.Name, corev1.TaintNodeNotReady, err)
	}
	return updated, nil
}

// NodeNames are the bed's nodes, node-a first.
var NodeNames = []string{"node-a", "node-b", "node-c"}

// GuestKubeletPort is the port on which node i's agent serves its kubelet
// API in the VM's root namespace, where qemu's host forward reaches it
// (every Node announces KubeletPort; the KubeletTunnel maps the two).
func GuestKubeletPort(i int) int { return KubeletPort + i }

// NodeIP is node i's address on the bed's LAN (192.168.50.11 for node-a).
func NodeIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 168, 50, byte(11 + i)}) }

// NodePodCIDR is node i's pod CIDR (10.244.1.0/24 for node-a), routed
// host-gw style by the other nodes.
func NodePodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(1 + i), 0}), 24)
}

// APIServerIP is the address the upstream bed's API server advertises
// (--advertise-address, the lease endpoint reconciler's address for the
// kubernetes Service): a namespace on the LAN relays it to the API server
// on the host, so pods reach it through the Service as in a cluster.
var APIServerIP = netip.MustParseAddr("192.168.50.1")
