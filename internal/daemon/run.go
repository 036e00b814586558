package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/health"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/internal/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/version"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
)

// NodeName is --hostname-override, or the hostname, lower-cased as
// kube-proxy does.
func NodeName(override string) (string, error) {
	name := override
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("hostname: %w", err)
		}
		name = h
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", errors.New("empty node name: set --hostname-override")
	}
	return name, nil
}

// RESTConfig is the API client configuration from --master and
// --kubeconfig (both empty: in-cluster), speaking protobuf as kube-proxy.
func RESTConfig(master, kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if master == "" && kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags(master, kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("API client configuration: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "ipvs-proxy/" + version.Version
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	return cfg, nil
}

// APIServerAddrs are the addresses of the host cfg dials (the host of its
// URL, resolved; nodeenv.DialedAddrs); guard.APIServer decides which of
// them are the API server.
func APIServerAddrs(ctx context.Context, cfg *rest.Config) []netip.Addr {
	return nodeenv.DialedAddrs(ctx, cfg.Host)
}

// kernel is the real data-plane stack of this network namespace.
type kernel struct {
	table *ipvskernel.Table
	ct    *ipvskernel.Conntrack
	nl    *netlink.Handle
	link  *addrmgr.KernelLink
	rules *iptables.Syncer
	guard *Guard
	app   *applier.Applier
	// addrKick receives (coalesced, never blocking the sender) when the
	// address manager's watch of kube-ipvs0 saw an address added or
	// removed by someone else, or lost events: a sync should run soon
	// (a partial one with no changed service is enough; it dumps
	// kube-ipvs0 and repairs it). stopWatch ends the watch.
	addrKick  chan struct{}
	stopWatch context.CancelFunc
	// env caches the node's own addresses between syncs; envNL is its
	// netlink handle (strict checking on).
	env   *nodeenv.Cache
	envNL *netlink.Handle
}

func openKernel(c *config.Config, log *zap.Logger) (*kernel, error) {
	k := &kernel{guard: NewGuard(nil), addrKick: make(chan struct{}, 1)}
	var err error
	if k.table, err = ipvskernel.Open(); err != nil {
		return nil, fmt.Errorf("open IPVS: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			k.close()
		}
	}()
	rel, err := ipvskernel.Release()
	if err != nil {
		return nil, err
	}
	changed, err := ipvs.WriteSysctls("/proc/sys", ipvs.KernelSysctls(rel, c.IPVSStrictARP))
	if noIPVS("/proc/sys", err) {
		return nil, ErrNoIPVS
	}
	if err != nil {
		return nil, fmt.Errorf("sysctls: %w", err)
	}
	// conntrack's table size and timeouts, as kube-proxy sets them at
	// every start (the kernel's defaults return after a reboot).
	ctMax := ConntrackMax(c.KubeProxy.Conntrack, runtime.NumCPU())
	if raised, err := raiseConntrackHashsize(conntrackHashsizeFile, ctMax); err != nil {
		log.Warn("cannot raise nf_conntrack's hash table size with nf_conntrack_max (as kube-proxy, it needs a writable /sys); lookups in a full table are slower", zap.Error(err))
	} else if raised {
		log.Info("set conntrack hashsize", zap.Int("value", ctMax/4))
	}
	// One by one: nf_conntrack_max is writable only from the host's own
	// network namespace, the timeouts from any.
	for _, s := range ConntrackSysctls(c.KubeProxy.Conntrack, runtime.NumCPU()) {
		done, err := ipvs.WriteSysctls("/proc/sys", []ipvs.Sysctl{s})
		if err != nil {
			log.Warn("cannot set a conntrack sysctl (--conntrack-*); the kernel's value stays", zap.Error(err))
		}
		changed = append(changed, done...)
	}
	for _, s := range changed {
		log.Info("set sysctl", zap.String("name", s.Name), zap.Int("value", s.Value))
	}
	if c.IPVSTCPTimeout > 0 || c.IPVSTCPFinTimeout > 0 || c.IPVSUDPTimeout > 0 {
		if err := k.table.SetTimeouts(c.IPVSTCPTimeout, c.IPVSTCPFinTimeout, c.IPVSUDPTimeout); err != nil {
			return nil, fmt.Errorf("ipvsadm --set: %w", err)
		}
	}
	if k.ct, err = ipvskernel.OpenConntrack(); err != nil {
		return nil, fmt.Errorf("open conntrack: %w", err)
	}
	if k.nl, err = netlink.NewHandle(); err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	link, err := addrmgr.EnsureDevice(k.nl)
	if err != nil {
		return nil, err
	}
	k.link = link
	if k.rules, err = iptableskernel.NewSyncer(log.Named("iptables")); err != nil {
		return nil, fmt.Errorf("ipsets: %w", err)
	}
	rec := ipvs.NewReconciler(k.table, ipvs.Options{
		GracefulPeriod: c.IPVSGracefulPeriod,
		ExcludeCIDRs:   c.Planning.ExcludeCIDRs,
		Conntrack:      k.ct,
		Journal:        ipvs.NewFileJournal(c.StateDir),
		Log:            log.Named("ipvs"),
	})
	mgr := addrmgr.NewManager(link, k.guard, log.Named("addrmgr"))
	mgr.SetExclude(c.Planning.ExcludeCIDRs)
	// `ip monitor address dev kube-ipvs0`: partial syncs then dump
	// kube-ipvs0 only after a change by others (or lost events). Without
	// the watch every sync dumps it, as before.
	var watchCtx context.Context
	watchCtx, k.stopWatch = context.WithCancel(context.Background())
	// With strict checking the kernel dumps the main routing table alone,
	// not the local table's route of every kube-ipvs0 address.
	var strict bool
	if k.envNL, strict, err = nodeenv.NewHandle(); err != nil {
		return nil, err
	}
	if !strict {
		log.Warn("netlink strict checking unavailable: every sync reads the whole routing table")
	}
	k.env = nodeenv.NewCache(k.envNL)
	// The same watch tells the node-address cache about the other links.
	link.OtherLinks = k.env.Changed
	if err := mgr.Watch(watchCtx, func() {
		select {
		case k.addrKick <- struct{}{}:
		default:
		}
	}); err != nil {
		log.Warn("not following "+addrmgr.Device+" addresses: every sync dumps them", zap.Error(err))
	}
	k.app = applier.New(rec, mgr, k.rules, log.Named("applier"))
	ok = true
	return k, nil
}

func (k *kernel) close() {
	if k.stopWatch != nil {
		k.stopWatch()
	}
	if k.rules != nil {
		k.rules.Close()
	}
	if k.nl != nil {
		k.nl.Close()
	}
	if k.envNL != nil {
		k.envNL.Close()
	}
	if k.ct != nil {
		k.ct.Close()
	}
	if k.table != nil {
		k.table.Close()
	}
}

// Full is a full sync: IPVS, kube-ipvs0, ipsets and chains read back and
// repaired.
func (k *kernel) Full(st *planner.State, nodeAddrs []netip.Addr) (*applier.Result, error) {
	return k.app.Full(st, nodeAddrs)
}

// Partial is a partial sync: the changed services' virtual servers, set
// entries against the mirror.
func (k *kernel) Partial(st *planner.State, changed ...types.NamespacedName) (*applier.Result, error) {
	return k.app.Partial(st, changed...)
}

// DefaultGCPercent is the garbage collector's target (GOGC) that Run sets
// unless the GOGC environment variable is set. The proxy's heap is mostly
// long-lived state — the informer caches, the incremental plan, the
// kernel mirrors — and little garbage between full syncs, so the
// collector's headroom over the live heap, not garbage, sets its peak: at
// 50 the heap peaks at 1.5 times the live heap instead of twice it, for
// more frequent but smaller collections (docs/benchmarks.md, the daemon
// section, has both measured).
const DefaultGCPercent = 50

// Run is `ipvs-proxy run`: it programs this node until ctx ends, then
// returns leaving the data plane as it is.
func Run(ctx context.Context, c *config.Config, log *zap.Logger) error {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
		log.Info("garbage collector target set; the GOGC environment variable overrides it", zap.Int("gcPercent", DefaultGCPercent))
	}
	for _, w := range c.Warnings {
		log.Warn("setting in --config means nothing to ipvs-proxy; ignored", zap.String("setting", w))
	}
	nodeName, err := NodeName(c.HostnameOverride)
	if err != nil {
		return err
	}
	restCfg, err := RESTConfig(c.Master, c.Kubeconfig)
	if err != nil {
		return err
	}
	// kube-proxy's --kube-api-qps, --kube-api-burst, --kube-api-content-type.
	restCfg.QPS, restCfg.Burst = c.KubeProxy.KubeAPIQPS, int(c.KubeProxy.KubeAPIBurst)
	if ct := c.KubeProxy.KubeAPIContentType; ct != "" {
		restCfg.ContentType = ct
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	opts := c.Planning
	opts.NodeName = nodeName
	opts.StrictARP = c.IPVSStrictARP
	// In a pod without --kubeconfig or --master the client dials
	// KUBERNETES_SERVICE_HOST: by default the kubernetes Service's
	// ClusterIP, programmed like any other (guard.APIServer).
	apiServer := guard.APIServer{Dialed: APIServerAddrs(ctx, restCfg), InCluster: c.Master == "" && c.Kubeconfig == ""}

	k, err := openKernel(c, log)
	if err != nil {
		return err
	}
	defer k.close()

	log.Info("starting", zap.String("version", version.Version), zap.String("node", nodeName),
		zap.String("apiServer", restCfg.Host), zap.Duration("syncPeriod", c.SyncPeriod),
		zap.Duration("minSyncPeriod", c.MinSyncPeriod))

	nodeCache := informers.NewNodeAddressCache(c.StateDir, c.DeletedNodeGrace)
	if err := nodeCache.Load(); err != nil {
		// Not fatal: the API server lists the Nodes; only the deleted
		// ones an earlier run remembered are lost.
		log.Warn("cannot read the node address cache; deleted Nodes remembered by an earlier run are not protected", zap.Error(err))
	}
	// Before the API server is waited for: what the node knows offline
	// protects now (a protected address on kube-ipvs0 may be what cuts
	// this node off from the API server).
	offline := opts
	offlineAPI := apiServer
	offlineAPI.Endpoints = nodeCache.APIServers()
	offline.APIServerAddrs = append(slices.Clone(opts.APIServerAddrs), offlineAPI.Addrs()...)
	if err := k.guardPass(offline, nodeCache.Protected(), log.Named("startup")); err != nil {
		log.Warn("startup guard pass failed; the first full sync removes what it left", zap.Error(err))
	}
	watcher, err := informers.NewWatcher(client, nodeName, nodeCache, 0, log.Named("informers"))
	if err != nil {
		return err
	}
	m := metrics.New()
	hp := health.NewProxy(2*c.SyncPeriod, nil)
	hp.Families = ipFamilies(c.Planning.ClusterCIDRs)
	m.KubeProxy.SetFamilies(hp.Families)
	k.rules.OnRestoreFailure = func(family string) {
		if family == iptables.FamilyIPv6 {
			m.KubeProxy.RestoreFailed("IPv6")
		} else {
			m.KubeProxy.RestoreFailed("IPv4")
		}
	}
	hp.OnAnswer = m.KubeProxy.Answered
	watcher.OnLocalNode = hp.SyncNode
	watcher.OnChange = hp.QueuedUpdate
	watcher.OnServiceChange = func(key types.NamespacedName) { m.KubeProxy.Queued(metrics.ChangeService, key) }
	watcher.OnEndpointsChange = func(key types.NamespacedName) { m.KubeProxy.Queued(metrics.ChangeEndpoints, key) }
	watcher.Converter = informers.Converter{MaxVirtualServers: c.Planning.MaxVirtualServersPerService}

	sink, stopEvents := events.NewBroadcaster(client, nodeName)
	defer stopEvents()
	leaseNS, err := events.LeaseNamespace(c.EventsLeaseNamespace)
	if err != nil {
		log.Warn("no namespace for the events Lease (--events-lease-namespace): this proxy reports every refusal as an Event itself", zap.Error(err))
	}
	eventOpts := events.DefaultOptions
	eventOpts.Elected = leaseNS != ""
	refusals := events.New(sink, func(kind, ns, name string) string {
		switch kind {
		case "Service":
			if s := watcher.ServiceObject(ns, name); s != nil {
				return string(s.UID)
			}
		case "Node":
			if n := watcher.NodeObject(name); n != nil {
				return string(n.UID)
			}
		}
		return ""
	}, eventOpts)
	// One Event per refusal across restarts too (--state-dir).
	if err := refusals.Persist(c.StateDir, func(msg string, err error) { log.Warn(msg, zap.Error(err)) }); err != nil {
		log.Warn("refusals reported by the last process unknown: their Events may be written again", zap.Error(err))
	}
	svcHealth := health.NewServices(log.Named("healthcheck"))
	svcHealth.ProxyHealthy = hp.ServiceProxyHealthy
	svcHealth.OnSync = m.KubeProxy.SetNoLocalEndpoints
	defer svcHealth.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	metricsHandler := health.WithProxyMode(m.Handler())
	if c.EnableProfiling {
		metricsHandler = metrics.WithProfiling(metricsHandler)
		log.Info("serving profiles", zap.String("address", c.MetricsBindAddress), zap.String("path", "/debug/pprof/"))
	}
	for _, srv := range []struct {
		what, addr string
		run        func(context.Context, string) error
	}{
		{"healthz", c.HealthzBindAddress, func(ctx context.Context, a string) error { return health.Serve(ctx, a, hp.Handler()) }},
		{"metrics", c.MetricsBindAddress, func(ctx context.Context, a string) error { return health.Serve(ctx, a, metricsHandler) }},
	} {
		if srv.addr == "" {
			continue
		}
		go func() {
			if err := srv.run(ctx, srv.addr); err != nil {
				log.Error("server stopped", zap.String("server", srv.what), zap.String("address", srv.addr), zap.Error(err))
			}
		}()
	}

	watcher.Start(ctx)
	go func() {
		// As kube-proxy, a node name that matches no Node is an error, and
		// /healthz answers 503 (nodeEligible false) until the Node exists.
		if watcher.WaitForCacheSync(ctx) && watcher.NodeObject(nodeName) == nil {
			log.Error("no Node has this node's name: /healthz answers 503 (nodeEligible false) until it exists; is --hostname-override the name the kubelet registered?",
				zap.String("node", nodeName))
		}
	}()
	if leaseNS != "" {
		go func() {
			el := events.Election{Client: client, Namespace: leaseNS, Identity: nodeName}
			if err := refusals.Elect(ctx, el, log.Named("events")); err != nil && ctx.Err() == nil {
				log.Error("events Lease election stopped: this proxy reports node-specific refusals only", zap.Error(err))
			}
		}()
	}
	loop := &Loop{
		Source:    watcher,
		Applier:   k,
		Env:       k.env.Read,
		Kick:      k.addrKick,
		Options:   opts,
		APIServer: apiServer,
		OnPlan: func(g *guard.Guard, _ *planner.State) {
			k.guard.Set(g)
		},
		SyncPeriod:    c.SyncPeriod,
		MinSyncPeriod: c.MinSyncPeriod,
		Events:        refusals,
		Health:        hp,
		Services:      svcHealth,
		Metrics:       m,
		Log:           log.Named("sync"),
	}
	err = loop.Run(ctx)
	if errors.Is(err, ErrCacheSync) && ctx.Err() != nil {
		log.Info("stopped before the informer caches synced; nothing applied")
		return nil
	}
	return err
}

// ipFamilies are the IP families of the cluster CIDRs (IPv4 when none is
// set): the ip_family label values of kube-proxy's series and the health
// body's status.
func ipFamilies(cidrs []netip.Prefix) []string {
	var v4, v6 bool
	for _, p := range cidrs {
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	switch {
	case v4 && v6:
		return []string{"IPv4", "IPv6"}
	case v6:
		return []string{"IPv6"}
	}
	return []string{"IPv4"}
}
