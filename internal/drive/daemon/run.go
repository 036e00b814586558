package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/internal/health"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/internal/version"
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

// DefaultGCPercent is the garbage collector's target (GOGC) that Run sets
// unless the GOGC environment variable is set. The proxy's heap is mostly
// long-lived state — the informer caches, the incremental plan, the
// kernel mirrors — and little garbage between full syncs, so the
// collector's headroom over the live heap, not garbage, sets its peak: at
// 50 the heap's goal is half the live heap above it instead of all of it,
// for more frequent but smaller collections (see BenchmarkSyncGC).
const DefaultGCPercent = 50

// Run is `ipvs-proxy run`: it programs this node until ctx ends, then
// returns leaving the data plane as it is.
func Run(ctx context.Context, c *config.Config, log *zap.Logger) error {
	setGCPercent(log)
	for _, w := range c.Warnings {
		log.Warn("setting in --config means nothing to ipvs-proxy; ignored", zap.String("setting", w))
	}
	nodeName, err := NodeName(c.HostnameOverride)
	if err != nil {
		return err
	}
	restCfg, client, err := apiClient(c)
	if err != nil {
		return err
	}
	opts := c.Planning
	opts.NodeName = nodeName
	// Either way the node answers no ARP for an IPv4 VIP, so one inside a
	// local subnet is bound without the guard's warning.
	opts.StrictARP = c.IPVSStrictARP || c.StrictARPVIPs
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
	for _, w := range rangeWarnings(&c.Planning) {
		log.Warn(w)
	}

	nodeCache := startupGuard(k, c, opts, apiServer, log)
	watcher, err := informers.NewWatcher(client, nodeName, nodeCache, 0, log.Named("informers"))
	if err != nil {
		return err
	}
	m, hp := observe(c, watcher)
	k.reportRestoreFailures(m.KubeProxy)
	k.reportServiceStats(c.ServiceStats, m)

	sink, stopEvents := events.NewBroadcaster(client, nodeName)
	defer stopEvents()
	refusals, leaseNS := refusalReporter(c, sink, watcher, log)
	svcHealth := health.NewServices(log.Named("healthcheck"))
	svcHealth.ProxyHealthy = hp.ServiceProxyHealthy
	defer svcHealth.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serve(ctx, c, hp.Handler(), m, log)

	watcher.Start(ctx)
	go checkNodeName(ctx, watcher, nodeName, log)
	if leaseNS != "" {
		go elect(ctx, refusals, events.Election{Client: client, Namespace: leaseNS, Identity: nodeName}, log)
	}
	// Validated with the flags.
	critical, _ := config.ParseServiceNames(c.CriticalServices)
	loop := &Loop{
		Source:    watcher,
		Applier:   k,
		Env:       k.env.Read,
		Kick:      k.addrKick,
		Options:   opts,
		APIServer: apiServer,
		Critical:  critical,
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

// setGCPercent sets the collector's target to DefaultGCPercent unless the
// GOGC environment variable sets it.
func setGCPercent(log *zap.Logger) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
		log.Info("garbage collector target set; the GOGC environment variable overrides it", zap.Int("gcPercent", DefaultGCPercent))
	}
}

// observe creates the metrics and the proxy's health and hooks them to the
// watcher's changes (kube-proxy's queued-change counters and its health
// timer) and converter settings.
func observe(c *config.Config, watcher *informers.Watcher) (*metrics.Metrics, *health.Proxy) {
	m := metrics.New()
	hp := health.NewProxy(2*c.SyncPeriod, nil)
	hp.Families = ipFamilies(c.Planning.ClusterCIDRs)
	m.KubeProxy.SetFamilies(hp.Families)
	hp.OnAnswer = m.KubeProxy.Answered
	watcher.OnLocalNode = hp.SyncNode
	watcher.OnChange = hp.QueuedUpdate
	watcher.OnServiceChange = func(key types.NamespacedName) { m.KubeProxy.Queued(metrics.ChangeService, key) }
	watcher.OnEndpointsChange = func(key types.NamespacedName) { m.KubeProxy.Queued(metrics.ChangeEndpoints, key) }
	watcher.Converter = convert.Converter{MaxVirtualServers: c.Planning.MaxVirtualServersPerService, MaxRealServers: c.Planning.MaxRealServersPerService}
	return m, hp
}

// checkNodeName logs an error when, once the caches synced, no Node has
// this node's name: as kube-proxy, that is an error, and /healthz answers
// 503 (nodeEligible false) until the Node exists.
func checkNodeName(ctx context.Context, watcher *informers.Watcher, nodeName string, log *zap.Logger) {
	if watcher.WaitForCacheSync(ctx) && watcher.NodeObject(nodeName) == nil {
		log.Error("no Node has this node's name: /healthz answers 503 (nodeEligible false) until it exists; is --hostname-override the name the kubelet registered?",
			zap.String("node", nodeName))
	}
}

// elect runs the events Lease election until ctx ends: its holder writes
// the refusals every node makes alike.
func elect(ctx context.Context, refusals *events.Refusals, el events.Election, log *zap.Logger) {
	if err := refusals.Elect(ctx, el, log.Named("events")); err != nil && ctx.Err() == nil {
		log.Error("events Lease election stopped: this proxy reports node-specific refusals only", zap.Error(err))
	}
}

// apiClient is the API client of kube-proxy's --master, --kubeconfig,
// --kube-api-qps, --kube-api-burst and --kube-api-content-type.
func apiClient(c *config.Config) (*rest.Config, kubernetes.Interface, error) {
	restCfg, err := RESTConfig(c.Master, c.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	// kube-proxy's --kube-api-qps, --kube-api-burst, --kube-api-content-type.
	restCfg.QPS, restCfg.Burst = c.KubeProxy.KubeAPIQPS, int(c.KubeProxy.KubeAPIBurst)
	if ct := c.KubeProxy.KubeAPIContentType; ct != "" {
		restCfg.ContentType = ct
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("API client: %w", err)
	}
	return restCfg, client, nil
}

// startupGuard loads the node-address cache of --state-dir and, before the
// API server is waited for, removes from kube-ipvs0 what it protects: what
// the node knows offline protects now (a protected address on kube-ipvs0
// may be what cuts this node off from the API server).
func startupGuard(k *kernel, c *config.Config, opts planner.Options, apiServer guard.APIServer, log *zap.Logger) *informers.NodeAddressCache {
	nodeCache := informers.NewNodeAddressCache(c.StateDir, c.DeletedNodeGrace)
	if err := nodeCache.Load(); err != nil {
		// Not fatal: the API server lists the Nodes; only the deleted
		// ones an earlier run remembered are lost.
		log.Warn("cannot read the node address cache; deleted Nodes remembered by an earlier run are not protected", zap.Error(err))
	}
	offline := opts
	offlineAPI := apiServer
	offlineAPI.Endpoints = nodeCache.APIServers()
	offline.APIServerAddrs = append(slices.Clone(opts.APIServerAddrs), offlineAPI.Addrs()...)
	if err := k.guardPass(offline, nodeCache.Protected(), log.Named("startup")); err != nil {
		log.Warn("startup guard pass failed; the first full sync removes what it left", zap.Error(err))
	}
	return nodeCache
}

// refusalReporter writes refusals as Events on their objects (looked up in
// the watcher's caches), once across restarts (--state-dir), and the
// namespace of the events Lease ("" when this proxy reports everything
// itself).
func refusalReporter(c *config.Config, sink func(*corev1.ObjectReference, string, string), watcher *informers.Watcher, log *zap.Logger) (*events.Refusals, string) {
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
	return refusals, leaseNS
}

// serve runs the healthz and metrics servers (kube-proxy's
// --healthz-bind-address and --metrics-bind-address, /proxyMode and, with
// --profiling, /debug/pprof/) until ctx ends.
func serve(ctx context.Context, c *config.Config, healthz http.Handler, m *metrics.Metrics, log *zap.Logger) {
	metricsHandler := health.WithProxyMode(m.Handler())
	if c.EnableProfiling {
		metricsHandler = metrics.WithProfiling(metricsHandler)
		log.Info("serving profiles", zap.String("address", c.MetricsBindAddress), zap.String("path", "/debug/pprof/"))
	}
	for _, srv := range []struct {
		what, addr string
		run        func(context.Context, string) error
	}{
		{"healthz", c.HealthzBindAddress, func(ctx context.Context, a string) error { return health.Serve(ctx, a, healthz) }},
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
