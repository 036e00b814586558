package recovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
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

// APIServerAddrs are the addresses of the API server at host (a URL or
// host[:port], as rest.Config.Host holds it): the literal IP, or what the
// resolver answers within ctx (nothing when it does not).
func APIServerAddrs(ctx context.Context, host string) []netip.Addr {
	h := host
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		h = u.Hostname()
	} else if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return []netip.Addr{a.Unmap()}
	}
	if h == "" {
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, a := range ips {
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// Cluster is what the API server said.
type Cluster struct {
	// Nodes maps every Node's name to its status.addresses (IPs).
	Nodes map[string][]netip.Addr
	// Wanted are the kube-ipvs0 addresses `run` would bind for the current
	// Services on this node (the plan's Addresses).
	Wanted []netip.Prefix
}

// ReadCluster lists the Nodes and the Services the proxy serves (kube-proxy's
// label selector) within ctx, and plans them with o (the node's identity and
// the planning flags) to learn which addresses are wanted on kube-ipvs0.
// Endpoints are not read: they do not decide what is bound.
func ReadCluster(ctx context.Context, client kubernetes.Interface, o planner.Options) (*Cluster, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	svcs, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: informers.ProxySelector().String()})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	c := &Cluster{Nodes: make(map[string][]netip.Addr, len(nodes.Items))}
	nodePtrs := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		nodePtrs[i] = n
		m, _ := informers.NodeFromObject(n)
		c.Nodes[n.Name] = m.Addresses
	}
	svcPtrs := make([]*corev1.Service, len(svcs.Items))
	for i := range svcs.Items {
		svcPtrs[i] = &svcs.Items[i]
	}
	st := planner.Plan(informers.Convert(svcPtrs, nil, nodePtrs), o)
	c.Wanted = st.Addresses
	return c, nil
}
