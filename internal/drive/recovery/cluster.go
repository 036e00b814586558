package recovery

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// ErrNoAPIServer is returned by RESTConfig when no kubeconfig, no --master
// and no in-cluster configuration is given: recover then works offline.
var ErrNoAPIServer = errors.New("no API server configured")

// RESTConfig loads the client configuration: --master and --kubeconfig as
// kube-proxy takes them, else the in-cluster configuration, else
// ErrNoAPIServer. timeout bounds every request.
func RESTConfig(kubeconfig, master string, timeout time.Duration) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" && master == "" {
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, ErrNoAPIServer
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags(master, kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("client configuration: %w", err)
	}
	cfg.Timeout = timeout
	return cfg, nil
}

// ListNodesAndServices lists every Node and the Services the proxy serves
// (kube-proxy's label selector), as recover and explain read them.
func ListNodesAndServices(ctx context.Context, client kubernetes.Interface) (*corev1.NodeList, *corev1.ServiceList, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	svcs, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: informers.ProxySelector().String()})
	if err != nil {
		return nil, nil, fmt.Errorf("list services: %w", err)
	}
	return nodes, svcs, nil
}

// Cluster is what the API server said.
type Cluster struct {
	// Nodes maps every Node's name to its status.addresses (IPs).
	Nodes map[string][]netip.Addr
	// Wanted are the kube-ipvs0 addresses `run` would bind for the current
	// Services on this node (the plan's Addresses).
	Wanted []netip.Prefix
	// APIServers are the addresses protected as the API server: api's
	// dialed host unless it is a Service IP, and the default/kubernetes
	// endpoints (guard.APIServer.Addrs).
	APIServers []netip.Addr
	// Resolvers are the node's resolvers (o.Resolvers) that are no
	// Service's ClusterIP.
	Resolvers []netip.Addr
}

// ReadCluster lists the Nodes, the Services the proxy serves (kube-proxy's
// label selector) and the API server's endpoints (the default/kubernetes
// EndpointSlices) within ctx, and plans the Services with o (the node's
// identity and the planning flags; its APIServerAddrs replaced by what api
// protects once the Services are known) to learn which addresses are
// wanted on kube-ipvs0, and o.Resolvers that are no Service IP. Other
// endpoints are not read: they do not decide what is bound.
func ReadCluster(ctx context.Context, client kubernetes.Interface, o planner.Options, api guard.APIServer) (*Cluster, error) {
	nodes, svcs, err := ListNodesAndServices(ctx, client)
	if err != nil {
		return nil, err
	}
	apiSlices, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nil, fmt.Errorf("list the API server's endpointslices: %w", err)
	}
	c := &Cluster{Nodes: make(map[string][]netip.Addr, len(nodes.Items))}
	svcPtrs := make([]*corev1.Service, len(svcs.Items))
	for i := range svcs.Items {
		svcPtrs[i] = &svcs.Items[i]
	}
	nodePtrs := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		nodePtrs[i] = &nodes.Items[i]
	}
	slicePtrs := make([]*discoveryv1.EndpointSlice, len(apiSlices.Items))
	for i := range apiSlices.Items {
		slicePtrs[i] = &apiSlices.Items[i]
	}
	c.APIServers = convert.APIServerAddrs(api, svcPtrs, slicePtrs)
	o.APIServerAddrs = c.APIServers
	c.Resolvers = slices.DeleteFunc(slices.Clone(o.Resolvers), convert.ServiceIPs(svcPtrs).Contains)
	o.Resolvers = c.Resolvers
	cv := convert.Converter{MaxVirtualServers: o.MaxVirtualServersPerService, MaxRealServers: o.MaxRealServersPerService}
	cluster := cv.Convert(svcPtrs, nil, nodePtrs)
	// The trust order: a Node's claim on a ClusterIP protects nothing.
	cluster.Nodes, _ = planner.TrustedNodes(&o, cluster.Nodes, nil, convert.ServiceIPs(svcPtrs))
	for _, m := range cluster.Nodes {
		c.Nodes[m.Name] = m.Addresses
	}
	st := planner.Plan(cluster, o)
	c.Wanted = st.Addresses
	return c, nil
}
