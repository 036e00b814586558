package main

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/manifest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
)

// planFlags are the flags of `plan` beyond the planning flags.
type planFlags struct {
	files     []string
	output    string
	nodeCache string
	grace     time.Duration
	opts      planner.Options
}

func newPlanCommand() *cobra.Command {
	f := &planFlags{}
	cmd := &cobra.Command{
		Use:   "plan -f FILE... --node-ip IP... [--node-name NAME] [flags]",
		Short: "Print what run would program on a node, offline",
		Long: `plan reads Services, EndpointSlices and Nodes from files (-f, repeatable; "-" is
stdin; multi-document YAML, JSON, or a List as kubectl get -o yaml prints it)
and prints exactly what run would program on the node named by --node-name
with the addresses --node-ip: the IPVS table in ipvsadm -S -n form, the
kube-ipvs0 addresses, the ipsets in ipset save form, the iptables rules in
iptables-save form, and every refusal with its reason. The output is sorted
and byte-for-byte deterministic. It touches no kernel and no API server.

Without --node-name, the node is the one Node in the input that has one of
the --node-ip addresses.`,
		Example: `  kubectl get svc,endpointslices,nodes -A -o yaml > cluster.yaml
  ipvs-proxy plan -f cluster.yaml --node-name n1 --node-ip 10.0.0.211
  ipvs-proxy plan -f - --node-ip 10.0.0.211 --refuse-node-external-ips -o json < cluster.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPlan(cmd, f) },
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringArrayVarP(&f.files, "filename", "f", nil, `File of Services, EndpointSlices and Nodes: YAML, JSON or a List (repeatable; "-" is stdin).`)
	fs.StringVarP(&f.output, "output", "o", "text", "Output format: text or json.")
	addNodeFlags(fs, &f.opts)
	fs.StringVar(&f.nodeCache, "node-cache", "", "A node address cache file run wrote (--state-dir/"+informers.NodeAddressFile+"): its Nodes are protected too, and the deleted ones it records for --deleted-node-grace-period after they were last seen.")
	fs.DurationVar(&f.grace, "deleted-node-grace-period", config.DefaultDeletedNodeGrace, "With --node-cache: how long after it was last seen a deleted Node stays protected.")
	fs.SetNormalizeFunc(config.NormalizeAliases)
	addPlanningFlags(fs, &f.opts)
	return cmd
}

func runPlan(cmd *cobra.Command, f *planFlags) error {
	if len(f.files) == 0 {
		return errors.New("plan: -f FILE is required (\"-\" reads stdin)")
	}
	if len(f.opts.LocalAddrs) == 0 {
		return errors.New("plan: --node-ip is required: the node's own addresses decide NodePorts and what the guard protects")
	}
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("plan: invalid argument %q for \"-o\" flag: must be text or json", f.output)
	}
	if err := validatePlanningOptions(&f.opts); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if n := countOf(f.files, "-"); n > 1 {
		return errors.New("plan: stdin (-f -) can be read only once")
	}

	objs, err := manifest.ReadFiles(f.files, cmd.InOrStdin())
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if len(objs.Ignored) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "ipvs-proxy: plan: ignored %d object(s) of kinds the proxy does not use, first: %s\n",
			len(objs.Ignored), objs.Ignored[0])
	}
	for _, u := range objs.UnknownFields {
		fmt.Fprintf(cmd.ErrOrStderr(), "ipvs-proxy: plan: warning: %s; planned without it\n", u)
	}
	cluster := informers.Converter{MaxVirtualServers: f.opts.MaxVirtualServersPerService, MaxRealServers: f.opts.MaxRealServersPerService}.Convert(objs.Services, objs.EndpointSlices, objs.Nodes)
	if f.nodeCache != "" {
		cache, err := informers.ReadNodeAddressFile(f.nodeCache)
		if err != nil {
			return fmt.Errorf("plan: --node-cache: %w", err)
		}
		cluster.Nodes = informers.WithCachedNodes(cluster.Nodes, cache.Protected(time.Now(), f.grace))
	}

	opts := f.opts
	if opts.NodeName == "" {
		name, err := nodeByAddress(cluster.Nodes, opts.LocalAddrs)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		opts.NodeName = name
	}

	if !slices.ContainsFunc(cluster.Nodes, func(n model.Node) bool { return n.Name == opts.NodeName }) {
		fmt.Fprintf(cmd.ErrOrStderr(), "ipvs-proxy: plan: warning: --node-name %s is not among the %d Node(s) given: the plan is what run would program on a node the API server does not list (run waits for its Node: /healthz answers 503)\n",
			model.Word(opts.NodeName), len(cluster.Nodes))
	}

	// --api-server-address is the host run dials: the API server unless it
	// is a Service IP of the input (10.96.0.1 in a pod); the input's
	// default/kubernetes EndpointSlices are the API server too.
	opts.APIServerAddrs = informers.APIServerAddrs(guard.APIServer{Dialed: opts.APIServerAddrs}, objs.Services, objs.EndpointSlices)
	// A resolver that is a Service's ClusterIP is a VIP like any other.
	opts.Resolvers = slices.DeleteFunc(opts.Resolvers, informers.ServiceIPs(objs.Services).Contains)
	// The trust order: a Node's claim on a Service IP protects nothing.
	cluster.Nodes, cluster.Refusals = planner.TrustedNodes(&opts, cluster.Nodes, cluster.Refusals, informers.ServiceIPs(objs.Services))
	state := planner.Plan(cluster, opts)
	out := cmd.OutOrStdout()
	if f.output == "json" {
		err = planner.WriteJSON(out, state)
	} else {
		err = planner.WriteText(out, state)
	}
	return failure(err)
}

func countOf(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// nodeByAddress finds the one Node that has one of addrs.
func nodeByAddress(nodes []model.Node, addrs []netip.Addr) (string, error) {
	var found []string
	for _, n := range nodes {
		if slices.ContainsFunc(n.Addresses, func(a netip.Addr) bool { return slices.Contains(addrs, a) }) {
			found = append(found, n.Name)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", errors.New("--node-name is required: no Node in the input has one of the --node-ip addresses")
	default:
		for i, n := range found {
			found[i] = model.Word(n)
		}
		return "", fmt.Errorf("--node-name is required: Nodes %s all have one of the --node-ip addresses", strings.Join(found, ", "))
	}
}
