package recovery

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// NodeKernel is the node's kernel as Recover uses it; *Kernel is the real
// one.
type NodeKernel interface {
	Read() (*Node, error)
	// Link is kube-ipvs0, nil when there is none.
	Link() addrmgr.Link
	// Table is the IPVS table, nil without ip_vs.
	Table() ipvs.Table
}

var _ NodeKernel = (*Kernel)(nil)

// Options of one Recover run.
type Options struct {
	// NodeName is this node's name (--hostname-override, else the hostname).
	NodeName string
	// StateDir is --state-dir, where `run` caches every Node's addresses.
	StateDir string
	// DeletedNodeGrace is --deleted-node-grace-period: a Node the cache
	// records as deleted is protected for that long after it was last seen
	// (0: not at all).
	DeletedNodeGrace time.Duration
	// Clock is the clock; nil means the real one.
	Clock clock.PassiveClock
	// Client talks to the API server; nil means offline.
	Client kubernetes.Interface
	// APIServerHost is the API server URL of the client configuration (its
	// address is protected even when it does not answer, unless it is a
	// Service IP: guard.APIServer); "" for none.
	APIServerHost string
	// APIServerInCluster is true when APIServerHost comes from the
	// in-cluster configuration (KUBERNETES_SERVICE_HOST): without the API
	// server's answer it is taken for the kubernetes Service's ClusterIP.
	APIServerInCluster bool
	// Timeout bounds the API server requests and the name lookup of
	// APIServerHost; 0 means 5s.
	Timeout time.Duration
	// ProtectedCIDRs is --protected-cidrs; ClusterCIDRs is --cluster-cidr
	// (pod addresses are never VIPs); ExcludeCIDRs is --ipvs-exclude-cidrs.
	ProtectedCIDRs, ClusterCIDRs, ExcludeCIDRs []netip.Prefix
	// MaxVirtualServersPerService is --max-virtual-servers-per-service, as
	// run has it: the addresses past it are not wanted; 0 means the
	// default.
	MaxVirtualServersPerService int
	// Stale is --stale: offline, an address with no virtual server is bad.
	Stale bool
	// Apply removes what was found; false is a dry run.
	Apply bool
	// Force (--force) applies even when the API server's Nodes do not
	// include this node (Report.Untrusted).
	Force bool
	// ProcRoot is where other proxies are looked for; "" means "/proc",
	// "-" skips the scan.
	ProcRoot string
	// Log receives one line per removal; nil means no logging.
	Log *zap.Logger
}

// Report is what Recover found and did.
type Report struct {
	// APIServer is "reachable", "unreachable: ERROR" or "not configured".
	APIServer string
	// NodeCache describes the --state-dir cache: "N nodes, updated T" or why
	// it was not used.
	NodeCache string
	// Findings are the bad addresses, sorted.
	Findings []Finding
	// Applied is true when --apply removed (or tried to remove) them.
	Applied bool
	// Result is what Apply did; nil in a dry run.
	Result *Result
	// OtherProxies are service proxies running on the node that would add
	// the addresses back.
	OtherProxies []Process
	// Warnings are what the operator should know (no cache, no device, ...).
	Warnings []string
	// Untrusted says why the API server that answered is not trusted —
	// its Nodes do not include this node: another cluster, an empty one,
	// or the wrong node name —, or is "". Apply then refuses without
	// Force: that API server's Services would make every VIP "not wanted".
	Untrusted string
}

func (o *Options) now() time.Time {
	if o.Clock == nil {
		return clock.RealClock{}.Now()
	}
	return o.Clock.Now()
}

// ErrUntrustedCluster is returned by Recover with Apply, without Force,
// when the API server's Nodes do not include this node; nothing was
// changed (the Report says what would have been).
var ErrUntrustedCluster = errors.New("recovery: the API server does not list this node")

// untrustedCluster says why an API server listing n Nodes, not name, is
// not trusted; known are the Nodes known (the API server's and the cache's,
// deleted ones with LastSeen).
func untrustedCluster(name string, n int, known []model.Node) string {
	why := fmt.Sprintf("the API server lists %d Nodes and not this node %q: another cluster, an empty one, or not this node's name (--hostname-override)?", n, name)
	for _, k := range known {
		if k.Name == name && !k.LastSeen.IsZero() {
			why += fmt.Sprintf("; the node address cache records %q as deleted from the API, last seen %s", name, k.LastSeen.UTC().Format(time.RFC3339))
			break
		}
	}
	return why + "; its Services would make every address on " + addrmgr.Device + " \"not wanted\": --apply refuses unless --force"
}

// ErrKernel is wrapped when the node's kernel state cannot be read.
var ErrKernel = errors.New("recovery: cannot read the node")

// Recover gathers what the node and the cluster know, finds the bad
// addresses on kube-ipvs0 (Find), and with o.Apply removes them with their
// virtual servers (Apply). The API server is optional: without it the guard
// uses the cached Node addresses and the node's own state. The error is
// non-nil when the node could not be read (no Report), or with Apply when
// the API server is not trusted (ErrUntrustedCluster, with the Report of
// what would have been removed; nothing was); removal failures are in
// Report.Result.
func Recover(ctx context.Context, k NodeKernel, o Options) (*Report, error) {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}

	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	rep := &Report{Findings: []Finding{}, OtherProxies: []Process{}}
	node, err := k.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKernel, err)
	}
	if !node.HasDevice {
		rep.Warnings = append(rep.Warnings, "no "+addrmgr.Device+" device on this node: nothing to recover")
	}

	nodes, cachedAPI := readNodeCache(o, rep)

	// Offline, the API server's endpoints are those run last saw.
	api := guard.APIServer{InCluster: o.APIServerInCluster, Endpoints: cachedAPI}
	if o.APIServerHost != "" {
		lctx, cancel := context.WithTimeout(ctx, o.Timeout)
		api.Dialed = nodeenv.DialedAddrs(lctx, o.APIServerHost)
		cancel()
	}
	// Offline the Services are unknown; ReadCluster protects what api
	// says once they are listed.
	popts := planner.Options{
		NodeName:       o.NodeName,
		LocalAddrs:     node.LocalAddrs(),
		LocalPrefixes:  node.LocalPrefixes,
		ClusterCIDRs:   o.ClusterCIDRs,
		ProtectedCIDRs: o.ProtectedCIDRs,
		APIServerAddrs: api.Addrs(),
		// ReadCluster converts the Services with it.
		MaxVirtualServersPerService: o.MaxVirtualServersPerService,
		Gateways:                    node.Gateways,
		NextHops:                    node.NextHops,
		// The resolvers only once the Services say which are no Service
		// IP (ReadCluster): offline, the cluster DNS's ClusterIP could be
		// one.
		Resolvers:    node.Resolvers,
		ExcludeCIDRs: o.ExcludeCIDRs,
	}
	cluster, nodes := readCluster(ctx, o, popts, api, nodes, rep)
	popts.Resolvers = nil
	if cluster != nil {
		popts.APIServerAddrs, popts.Resolvers = cluster.APIServers, cluster.Resolvers
	}
	g := guard.New(planner.GuardInputs(&popts, nodes))
	facts := Facts{
		Bound:          node.Bound,
		VirtualServers: node.VirtualServers,
		Guard:          g,
		Stale:          o.Stale,
		ExcludeCIDRs:   o.ExcludeCIDRs,
	}
	if cluster != nil {
		facts.Wanted, facts.WantedKnown = cluster.Wanted, true
	}
	rep.Findings = Find(facts)

	findOtherProxies(o, rep)

	if !o.Apply || len(rep.Findings) == 0 {
		return rep, nil
	}
	if rep.Untrusted != "" && !o.Force {
		return rep, fmt.Errorf("%w: %s", ErrUntrustedCluster, rep.Untrusted)
	}
	rep.Applied = true
	rep.Result = Apply(k.Link(), k.Table(), rep.Findings)
	logApplied(rep, log)
	return rep, nil
}

// readNodeCache reads the Node addresses and API server endpoints `run`
// last saw (--state-dir), and says so in rep.
func readNodeCache(o Options, rep *Report) ([]model.Node, []netip.Addr) {
	var nodes []model.Node
	var cachedAPI []netip.Addr
	if o.StateDir != "" {
		cache, err := informers.ReadNodeAddresses(o.StateDir)
		switch {
		case err != nil:
			rep.NodeCache = err.Error()
			rep.Warnings = append(rep.Warnings, "no cached Node addresses ("+err.Error()+"): other nodes' addresses are known only from the API server")
		default:
			nodes = cache.Protected(o.now(), o.DeletedNodeGrace)
			cachedAPI = cache.APIServers
			deleted := 0
			for _, n := range nodes {
				if !n.LastSeen.IsZero() {
					deleted++
				}
			}
			rep.NodeCache = fmt.Sprintf("%d nodes, updated %s", len(nodes), cache.Updated.UTC().Format(time.RFC3339))
			if deleted > 0 {
				rep.NodeCache = fmt.Sprintf("%d nodes (%d deleted from the API, protected for %v after they were last seen), updated %s",
					len(nodes), deleted, o.DeletedNodeGrace, cache.Updated.UTC().Format(time.RFC3339))
			}
		}
	} else {
		rep.NodeCache = "no --state-dir"
	}

	return nodes, cachedAPI
}

// readCluster lists the Services, EndpointSlices and Nodes when a client is
// configured, within o.Timeout; nil when it cannot (rep says why). Its
// Nodes join nodes, and a cluster that does not list this node is
// untrusted.
func readCluster(ctx context.Context, o Options, popts planner.Options, api guard.APIServer, nodes []model.Node, rep *Report) (*Cluster, []model.Node) {
	var cluster *Cluster
	if o.Client == nil {
		rep.APIServer = "not configured"
	} else {
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		var err error
		cluster, err = ReadCluster(cctx, o.Client, popts, api)
		cancel()
		if err != nil {
			rep.APIServer = "unreachable: " + err.Error()
			cluster = nil
		} else {
			rep.APIServer = "reachable"
			for n, as := range cluster.Nodes {
				nodes = append(nodes, model.Node{Name: n, Addresses: as})
			}
		}
	}
	if cluster != nil {
		if _, listed := cluster.Nodes[o.NodeName]; !listed {
			rep.Untrusted = untrustedCluster(o.NodeName, len(cluster.Nodes), nodes)
			rep.Warnings = append(rep.Warnings, rep.Untrusted)
		}
	}

	return cluster, nodes
}

// findOtherProxies lists the proxies running on the node (o.ProcRoot) in
// rep, each with a warning: they may add addresses back.
func findOtherProxies(o Options, rep *Report) {
	if o.ProcRoot != "-" {
		root := o.ProcRoot
		if root == "" {
			root = "/proc"
		}
		procs, err := FindProxies(root)
		if err != nil {
			rep.Warnings = append(rep.Warnings, "cannot scan "+root+" for other proxies: "+err.Error())
		}
		rep.OtherProxies = append(rep.OtherProxies, procs...)
	}
	for _, p := range rep.OtherProxies {
		if p.Name == "ipvs-proxy" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("ipvs-proxy run (pid %d) is running: it never binds a protected address, and binds again the VIPs its Services want (`%s`)", p.PID, p.Cmdline))
			continue
		}
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s (pid %d) is running and may add addresses back: stop it first (`%s`)", p.Name, p.PID, p.Cmdline))
	}
}

// logApplied logs each removal Apply made and each it could not.
func logApplied(rep *Report, log *zap.Logger) {
	for _, fd := range rep.Findings {
		if slices.Contains(rep.Result.Unbound, fd.Address) {
			log.Info("removed address", zap.String("device", addrmgr.Device), zap.Stringer("address", fd.Address),
				zap.String("reason", string(fd.Reason)), zap.String("detail", fd.Detail))
		}
	}
	for _, vs := range rep.Result.Deleted {
		log.Info("deleted virtual server", zap.Stringer("virtualServer", vs))
	}
	for _, err := range rep.Result.Errors {
		log.Error("removal failed", zap.Error(err))
	}
}
