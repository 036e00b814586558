// Package nodeplan owns the one path from Services, EndpointSlices and
// Nodes (read from files, or listed from the API server) and a node's
// options to that node's plan, as `plan` and `explain` compute it and the
// kernel tests replay it: the conversion, the node address cache, the
// node's name from its addresses, the API server and resolvers judged
// against the input, the trust order, then the planner.
package nodeplan

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/manifest"
)

// ErrNodeCache wraps a node address cache file that cannot be read.
var ErrNodeCache = errors.New("--node-cache")

// Input is what a node's plan is computed from.
type Input struct {
	Objects *manifest.Objects
	// NodeCache is a node address cache file run wrote
	// (informers.NodeAddressFile); empty for none.
	NodeCache string
	// Grace is how long after it was last seen a deleted Node of the
	// cache stays protected; Now is the time it is judged at.
	Grace time.Duration
	Now   time.Time
	// Options are the node's planning options as the flags gave them;
	// an empty NodeName is the one Node that has a LocalAddrs address.
	Options planner.Options
}

// Result is the node's plan and what it was planned from.
type Result struct {
	Cluster model.Cluster
	// Options are Input.Options completed: the node's name, the API
	// server's addresses, the resolvers that are no Service's ClusterIP.
	Options planner.Options
	// Plan is the planner fed every Service (planner.Incremental.Service
	// gives one Service's share); State is its state.
	Plan  *planner.Incremental
	State planner.State
	// Warnings are what the caller should print: objects of kinds the
	// proxy does not use, fields a kind does not have, a node name that
	// no Node has.
	Warnings []string
}

// Plan plans the node of in.Options from in.Objects as run would. Its
// errors are bad input: a node cache that cannot be read, no or several
// Nodes with the node's addresses when no name is given; the result then
// holds the warnings found before.
func Plan(in Input) (*Result, error) {
	objs := in.Objects
	r := &Result{Options: in.Options}
	if len(objs.Ignored) > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("ignored %d object(s) of kinds the proxy does not use, first: %s",
			len(objs.Ignored), objs.Ignored[0]))
	}
	for _, u := range objs.UnknownFields {
		r.Warnings = append(r.Warnings, "warning: "+u+"; planned without it")
	}
	opts := &r.Options
	cluster := convert.Converter{MaxVirtualServers: opts.MaxVirtualServersPerService, MaxRealServers: opts.MaxRealServersPerService}.Convert(objs.Services, objs.EndpointSlices, objs.Nodes)
	if in.NodeCache != "" {
		cache, err := informers.ReadNodeAddressFile(in.NodeCache)
		if err != nil {
			return r, fmt.Errorf("%w: %w", ErrNodeCache, err)
		}
		cluster.Nodes = informers.WithCachedNodes(cluster.Nodes, cache.Protected(in.Now, in.Grace))
	}
	if opts.NodeName == "" {
		name, err := nodeByAddress(cluster.Nodes, opts.LocalAddrs)
		if err != nil {
			return r, err
		}
		opts.NodeName = name
	}
	if !slices.ContainsFunc(cluster.Nodes, func(n model.Node) bool { return n.Name == opts.NodeName }) {
		r.Warnings = append(r.Warnings, fmt.Sprintf("warning: --node-name %s is not among the %d Node(s) given: the plan is what run would program on a node the API server does not list (run waits for its Node: /healthz answers 503)",
			model.Word(opts.NodeName), len(cluster.Nodes)))
	}
	// --api-server-address is the host run dials: the API server unless it
	// is a Service IP of the input (10.96.0.1 in a pod); the input's
	// default/kubernetes EndpointSlices are the API server too.
	opts.APIServerAddrs = convert.APIServerAddrs(guard.APIServer{Dialed: opts.APIServerAddrs}, objs.Services, objs.EndpointSlices)
	serviceIPs := convert.ServiceIPs(objs.Services)
	// A resolver that is a Service's ClusterIP is a VIP like any other.
	opts.Resolvers = slices.DeleteFunc(slices.Clone(opts.Resolvers), serviceIPs.Contains)
	// The trust order: a Node's claim on a Service IP protects nothing.
	cluster.Nodes, cluster.Refusals = planner.TrustedNodes(opts, cluster.Nodes, cluster.Refusals, serviceIPs)
	r.Cluster = cluster
	r.Plan = planner.PlanAll(cluster, *opts)
	r.State = r.Plan.State()
	return r, nil
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
