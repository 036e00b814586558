package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/explain"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/recovery"
	"github.com/ipvs-proxy/ipvs-proxy/internal/manifest"
)

// explainFlags are explain's: plan's, where the objects come from, and
// whether the kernel is compared.
type explainFlags struct {
	planFlags
	kubeconfig, master string
	timeout            time.Duration
	kernel             bool
}

func newExplainCommand() *cobra.Command {
	f := &explainFlags{}
	cmd := &cobra.Command{
		Use:   "explain NAMESPACE/NAME (-f FILE... | --kubeconfig FILE) --node-ip IP... [flags]",
		Short: "Say what is programmed for one Service on a node, and why",
		Long: `explain plans the node as plan does and prints one Service's share: each
virtual server (address kind, family, protocol, port, scheduler and flags)
with its real servers and weights, which endpoints each traffic policy chose
and why not the others (not ready, not serving, terminating, topology hints,
on another node, refused by the guard), the guard's verdict on each address,
every refusal, and the ipset entries that carry it with the chains whose
rules match their sets.

The objects come from files (-f, as plan reads them) or from the API server
(--kubeconfig, --master; the Services and Nodes, and only this Service's and
default/kubernetes' EndpointSlices). With --kernel (the default with the API
server) the kernel of this network namespace is compared, key by key: each
virtual server and its real servers, the kube-ipvs0 addresses it binds and
the protected ones it must not, each ipset entry. Exit status 1 lists the
differences; real servers the kernel keeps at weight 0 while their
connections drain are no difference.`,
		Example: `  ipvs-proxy explain default/web -f cluster.yaml --node-name n1 --node-ip 10.0.0.211
  ipvs-proxy explain default/web --kubeconfig /var/lib/kube-proxy/kubeconfig.conf --node-ip 10.0.0.211 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runExplain(cmd, f, args[0]) },
	}
	fs := cmd.Flags()
	f.register(fs)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Read the objects from the API server of this kubeconfig instead of -f.")
	fs.StringVar(&f.master, "master", "", "The address of the Kubernetes API server (overrides any value in kubeconfig).")
	fs.DurationVar(&f.timeout, "request-timeout", 10*time.Second, "With the API server: the time limit of each request.")
	fs.BoolVar(&f.kernel, "kernel", false, "Compare with the kernel of this network namespace (default true with --kubeconfig or --master).")
	return cmd
}

// errDiffers is the kernel that does not hold what the plan says.
var errDiffers = errors.New("the kernel differs from the plan")

func runExplain(cmd *cobra.Command, f *explainFlags, arg string) error {
	name, err := serviceName(arg)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	live := f.kubeconfig != "" || f.master != ""
	if live && len(f.files) > 0 {
		return errors.New("explain: -f and --kubeconfig (or --master) are two sources of the objects: give one")
	}
	if !live && len(f.files) == 0 {
		return errors.New("explain: -f FILE or --kubeconfig FILE is required: where the Services, EndpointSlices and Nodes come from")
	}
	if !cmd.Flags().Changed("kernel") {
		f.kernel = live
	}
	if err := f.check("explain", false); err != nil {
		return err
	}
	var objs *manifest.Objects
	if live {
		if objs, err = f.listObjects(cmd.Context(), name); err != nil {
			return failure(fmt.Errorf("explain: %w", err))
		}
	} else if objs, err = f.readFiles(cmd, "explain"); err != nil {
		return err
	}
	res, err := f.plan(cmd, "explain", objs)
	if err != nil {
		return err
	}
	x, err := explain.Build(res, name)
	if errors.Is(err, explain.ErrNoService) {
		return fmt.Errorf("explain: %s", noService(objs, name))
	}
	if err != nil {
		return failure(fmt.Errorf("explain: %w", err))
	}
	if f.kernel {
		if err := compareKernel(x); err != nil {
			return failure(fmt.Errorf("explain: read the kernel: %w", err))
		}
	}
	out := cmd.OutOrStdout()
	if f.output == "json" {
		err = explain.WriteJSON(out, x)
	} else {
		err = explain.WriteText(out, x)
	}
	if err != nil {
		return failure(err)
	}
	if x.Kernel != nil && !x.Kernel.Matches {
		return failure(fmt.Errorf("explain: %w for Service %s (%d difference(s))", errDiffers, name, len(x.Kernel.Differences)))
	}
	return nil
}

// serviceName parses NAMESPACE/NAME.
func serviceName(arg string) (types.NamespacedName, error) {
	ns, n, ok := strings.Cut(arg, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return types.NamespacedName{}, fmt.Errorf("%q is not NAMESPACE/NAME", arg)
	}
	return types.NamespacedName{Namespace: ns, Name: n}, nil
}

// noService says why the plan has no port of Service name.
func noService(objs *manifest.Objects, name types.NamespacedName) string {
	i := slices.IndexFunc(objs.Services, func(s *corev1.Service) bool { return s.Namespace == name.Namespace && s.Name == name.Name })
	if i < 0 {
		return fmt.Sprintf("no Service %s in the input (%d Service(s))", name, len(objs.Services))
	}
	s := objs.Services[i]
	switch {
	case s.Spec.Type == corev1.ServiceTypeExternalName:
		return fmt.Sprintf("Service %s is of type ExternalName: no proxy serves it", name)
	case s.Spec.ClusterIP == corev1.ClusterIPNone:
		return fmt.Sprintf("Service %s is headless (clusterIP None): no proxy serves it", name)
	}
	return fmt.Sprintf("Service %s has no port the proxy serves", name)
}

// explainClient is the API server's client for --kubeconfig and --master;
// tests replace it.
var explainClient = func(kubeconfig, master string, timeout time.Duration) (kubernetes.Interface, error) {
	cfg, err := recovery.RESTConfig(kubeconfig, master, timeout)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return client, nil
}

// listObjects lists from the API server what the plan of Service name
// needs: every Node, every Service the proxy serves (kube-proxy's label
// selector), and the EndpointSlices of name and of default/kubernetes (the
// API server's endpoints the guard protects).
func (f *explainFlags) listObjects(ctx context.Context, name types.NamespacedName) (*manifest.Objects, error) {
	client, err := explainClient(f.kubeconfig, f.master, f.timeout)
	if err != nil {
		return nil, err
	}
	nodes, svcs, err := recovery.ListNodesAndServices(ctx, client)
	if err != nil {
		return nil, err
	}
	objs := &manifest.Objects{}
	for i := range nodes.Items {
		objs.Nodes = append(objs.Nodes, &nodes.Items[i])
	}
	for i := range svcs.Items {
		objs.Services = append(objs.Services, &svcs.Items[i])
	}
	for i, s := range []types.NamespacedName{name, {Namespace: metav1.NamespaceDefault, Name: "kubernetes"}} {
		if i > 0 && s == name {
			break
		}
		eps, err := client.DiscoveryV1().EndpointSlices(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.Name})
		if err != nil {
			return nil, fmt.Errorf("list endpointslices of %s: %w", s, err)
		}
		for j := range eps.Items {
			objs.EndpointSlices = append(objs.EndpointSlices, &eps.Items[j])
		}
	}
	return objs, nil
}
