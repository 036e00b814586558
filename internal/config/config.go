// Package config holds the settings of `ipvs-proxy run`: the command-line
// flags (named as kube-proxy names them where kube-proxy has them), the
// --config file in the proxy's own ProxyConfiguration kind, and kube-proxy's
// KubeProxyConfiguration read from the same file. It only parses and
// validates; it never talks to the API server or the kernel.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// ErrPrimaryWithCIDRs: kube-proxy's nodePortAddresses value "primary" must
// be the only one.
var ErrPrimaryWithCIDRs = errors.New(`"primary" must be the only --nodeport-addresses value`)

// Defaults, as kube-proxy's where kube-proxy has the setting.
const (
	DefaultSyncPeriod         = 30 * time.Second
	DefaultHealthzBindAddress = "0.0.0.0:10256"
	DefaultMetricsBindAddress = "127.0.0.1:10249"
	DefaultScheduler          = "rr"
	DefaultMasqueradeBit      = 14
	DefaultStateDir           = "/var/lib/ipvs-proxy"
	DefaultGracefulPeriod     = 15 * time.Minute
	DefaultDeletedNodeGrace   = informers.DefaultDeletedNodeGrace
)

// Config is every setting of `ipvs-proxy run`.
type Config struct {
	// ConfigFile is --config.
	ConfigFile string

	Kubeconfig       string
	Master           string
	HostnameOverride string

	// Planning holds the planning flags shared with `plan` (--cluster-cidr,
	// --nodeport-addresses, --ipvs-scheduler, --ipvs-exclude-cidrs,
	// --masquerade-all, --masquerade-bit, --refuse-node-external-ips,
	// --protected-cidrs, --max-virtual-servers-per-service), registered by
	// the function given to AddFlags.
	// NodeName, LocalAddrs, APIServerAddrs and Gateways are filled in at run time.
	Planning planner.Options

	IPVSStrictARP      bool
	IPVSTCPTimeout     time.Duration
	IPVSTCPFinTimeout  time.Duration
	IPVSUDPTimeout     time.Duration
	IPVSGracefulPeriod time.Duration
	// StrictARPVIPs is --strict-arp-vips: the node answers no ARP request
	// for a kube-ipvs0 address (iptables.ARPTable), every interface's
	// arp_ignore and arp_announce left as they are.
	StrictARPVIPs bool

	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration

	Cleanup bool

	HealthzBindAddress string
	MetricsBindAddress string
	// EnableProfiling is --profiling: net/http/pprof under /debug/pprof/ on
	// the metrics server, as kube-proxy's enableProfiling.
	EnableProfiling bool
	// ServiceStats are the per-Service IPVS statistics' flags.
	ServiceStats ServiceStats
	// CriticalServices is --critical-services (critical.go).
	CriticalServices []string

	StateDir string
	// DeletedNodeGrace is --deleted-node-grace-period: how long a deleted
	// Node's addresses stay protected.
	DeletedNodeGrace time.Duration

	// EventsLeaseNamespace is --events-lease-namespace: where the Lease
	// that elects the reporter of node-independent refusals lives; empty
	// means the pod's own namespace.
	EventsLeaseNamespace string

	LogLevel  string
	LogFormat string
	// Verbosity is kube-proxy's --v (or logging.verbosity): klog's V(n)
	// becomes zap level -n, so any n above 0 also enables debug lines.
	Verbosity int

	// KubeProxy holds kube-proxy's flags that have no name of the proxy's
	// own (kubeproxyflags.go).
	KubeProxy KubeProxyFlags

	// planning is the function AddFlags was given: Complete registers the
	// same flags again to rebuild the configuration when --config is set.
	planning PlanningFlags

	// Warnings are the settings read from --config that mean nothing to
	// ipvs-proxy; run logs them once at startup.
	Warnings []string
	// UnknownFields are the paths of a KubeProxyConfiguration's fields that
	// kube-proxy 1.34 does not have (also in Warnings). run starts with
	// them, as kube-proxy decodes v1alpha1 leniently; the pre-flight
	// (--init-only, --write-config-to) refuses them.
	UnknownFields []string
	// KubeProxyModeEmpty is a KubeProxyConfiguration whose mode is "" (and
	// no --proxy-mode): kube-proxy runs it as iptables on Linux, so the
	// node may hold kube-proxy's iptables-mode rules; run says so once.
	KubeProxyModeEmpty bool
	// IgnoredFlags are the kube-proxy flags given on the command line that
	// --config overrides, as kube-proxy ignores them; run logs them once.
	IgnoredFlags []string
}

// Default returns the configuration with every default filled in.
func Default() *Config {
	return &Config{
		Planning: planner.Options{Scheduler: DefaultScheduler, MasqueradeBit: DefaultMasqueradeBit,
			MaxVirtualServersPerService: convert.DefaultMaxVirtualServers, MaxRealServersPerService: convert.DefaultMaxRealServers},
		IPVSGracefulPeriod: DefaultGracefulPeriod,
		SyncPeriod:         DefaultSyncPeriod,
		HealthzBindAddress: DefaultHealthzBindAddress,
		MetricsBindAddress: DefaultMetricsBindAddress,
		ServiceStats:       ServiceStats{Enabled: true, MaxSeries: metrics.DefaultServiceStatsMaxSeries},
		StateDir:           DefaultStateDir,
		DeletedNodeGrace:   DefaultDeletedNodeGrace,
		LogLevel:           "info",
		LogFormat:          "json",
		KubeProxy:          defaultKubeProxyFlags(),
	}
}

// PlanningFlags registers the planning flags `plan` and `run` share, bound
// to o, and sets their defaults in o (cmd/ipvs-proxy's addPlanningFlags).
type PlanningFlags func(fs *pflag.FlagSet, o *planner.Options)

// AddFlags registers every flag of `run` on fs, bound to c; planning
// registers the flags shared with `plan`.
func (c *Config) AddFlags(fs *pflag.FlagSet, planning PlanningFlags) {
	c.planning = planning
	fs.SetNormalizeFunc(NormalizeAliases)
	planning(fs, &c.Planning)
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "Configuration file: ipvs-proxy.io/v1alpha1 ProxyConfiguration, or kube-proxy's kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration. As in kube-proxy, the file wins over kube-proxy's flags except --hostname-override and the logging flags.")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "Path to a kubeconfig file; empty means the in-cluster configuration.")
	fs.StringVar(&c.Master, "master", c.Master, "The address of the Kubernetes API server (overrides any value in kubeconfig).")
	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "This node's name; empty means the hostname.")
	fs.BoolVar(&c.IPVSStrictARP, "ipvs-strict-arp", c.IPVSStrictARP, "Set arp_ignore=1 and arp_announce=2 so the node does not answer ARP for kube-ipvs0 addresses.")
	fs.BoolVar(&c.StrictARPVIPs, "strict-arp-vips", c.StrictARPVIPs, "Drop ARP requests for kube-ipvs0's IPv4 addresses (ClusterIPs, externalIPs, LoadBalancer IPs) with an nftables table arp ipvs-proxy, leaving every interface's arp_ignore and arp_announce as they are: for MetalLB or kube-vip in L2 mode without --ipvs-strict-arp's side effects.")
	fs.DurationVar(&c.IPVSTCPTimeout, "ipvs-tcp-timeout", c.IPVSTCPTimeout, "IPVS idle TCP connection timeout; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVSTCPFinTimeout, "ipvs-tcpfin-timeout", c.IPVSTCPFinTimeout, "IPVS TCP FIN_WAIT timeout; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVSUDPTimeout, "ipvs-udp-timeout", c.IPVSUDPTimeout, "IPVS UDP timeout; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVSGracefulPeriod, "ipvs-graceful-period", c.IPVSGracefulPeriod, "How long a removed TCP real server stays at weight 0 while it still has connections.")
	fs.DurationVar(&c.SyncPeriod, "ipvs-sync-period", c.SyncPeriod, "How often the whole state is read back from the kernel and repaired (alias --sync-period).")
	fs.DurationVar(&c.MinSyncPeriod, "ipvs-min-sync-period", c.MinSyncPeriod, "Minimum time between two applies of changes; 0 applies at once, batching what arrives during an apply (alias --min-sync-period).")
	fs.BoolVar(&c.Cleanup, "cleanup", c.Cleanup, "Remove what the proxy created (virtual servers, kube-ipvs0, chains, ipsets) and exit.")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "host:port of the /healthz and /livez server; empty disables it.")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "host:port of the Prometheus /metrics server; empty disables it.")
	fs.BoolVar(&c.EnableProfiling, "profiling", c.EnableProfiling, "Serve Go's profiles (net/http/pprof: heap, CPU, goroutines) under /debug/pprof/ on the --metrics-bind-address server, as kube-proxy's --profiling.")
	c.ServiceStats.addFlags(fs)
	c.addCriticalFlag(fs)
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "Directory for the cached Node addresses that ipvs-proxy recover reads offline, and the ownership journal of virtual servers the kernel alone does not show to be the proxy's.")
	fs.DurationVar(&c.DeletedNodeGrace, "deleted-node-grace-period", c.DeletedNodeGrace, "How long the addresses of a Node deleted from the API stay protected (remembered in --state-dir across restarts): a Node deleted by mistake keeps its addresses off kube-ipvs0 until its kubelet registers it again.")
	fs.StringVar(&c.EventsLeaseNamespace, "events-lease-namespace", c.EventsLeaseNamespace, "Namespace of the coordination.k8s.io Lease ipvs-proxy-events whose holder, one proxy per cluster, reports the refusals every node makes alike as Events; empty means the pod's own namespace ($POD_NAMESPACE, else its service account's). Without any, this proxy reports every refusal itself.")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "Log level: debug, info, warn, error; --v above 0 lowers it further.")
	fs.StringVar(&c.LogFormat, "logging-format", c.LogFormat, "Log format: json, or text (alias console): zap's console encoder (alias --log-format).")
	fs.IntVarP(&c.Verbosity, "v", "v", c.Verbosity, "kube-proxy's log verbosity: klog's V(n) lines are logged at zap level -n, so 1 and above also log debug lines.")
	c.KubeProxy.addFlags(fs)
}

// Complete reads --config (if given), completes bind addresses without a
// port, then validates the result.
//
// As kube-proxy: with --config, every kube-proxy flag on the command line
// but --hostname-override, the logging flags and those with no field in the
// file (--master, --cleanup, ...) is ignored (named in IgnoredFlags), and
// the file's value or the default applies. The proxy's own flags, which
// kube-proxy does not have, win over the file.
func (c *Config) Complete(fs *pflag.FlagSet) error {
	if c.ConfigFile == "" {
		// kube-proxy's deprecated --healthz-port and --metrics-port.
		c.HealthzBindAddress = addressFromPort(c.HealthzBindAddress, c.KubeProxy.HealthzPort)
		c.MetricsBindAddress = addressFromPort(c.MetricsBindAddress, c.KubeProxy.MetricsPort)
	} else if err := c.rebuildFromFile(fs); err != nil {
		return err
	}
	// A bind address without a port gets kube-proxy's default port.
	c.HealthzBindAddress = withPort(c.HealthzBindAddress, DefaultHealthzPort)
	c.MetricsBindAddress = withPort(c.MetricsBindAddress, DefaultMetricsPort)
	return c.Validate()
}

// addressFromPort is kube-proxy's reading of --healthz-port and
// --metrics-port: 0 disables the server, another port completes an
// address given without one.
func addressFromPort(addr string, port int32) string {
	if port == 0 {
		return ""
	}
	return withPort(addr, port)
}

// rebuildFromFile replaces c by the defaults, the command-line flags that
// win over the file (commandLineWins and the proxy's own), then the file.
func (c *Config) rebuildFromFile(fs *pflag.FlagSet) error {
	if fs == nil {
		fs = pflag.NewFlagSet("run", pflag.ContinueOnError)
	}
	d := Default()
	d.ConfigFile = c.ConfigFile
	dfs := pflag.NewFlagSet(fs.Name(), pflag.ContinueOnError)
	planning := c.planning
	if planning == nil {
		// No planning flags registered (a caller without AddFlags): the
		// planning options c has are kept as the defaults.
		planning = func(*pflag.FlagSet, *planner.Options) {}
		d.Planning = c.Planning
	}
	d.AddFlags(dfs, planning)
	var errs []error
	fs.Visit(func(f *pflag.Flag) {
		if fileWins(f.Name) {
			d.IgnoredFlags = append(d.IgnoredFlags, "--"+f.Name)
			return
		}
		if err := copyFlag(dfs, f); err != nil {
			errs = append(errs, err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := d.loadFile(c.ConfigFile, dfs); err != nil {
		return err
	}
	*c = *d
	return nil
}

// copyFlag sets the flag of dst named as f to f's value, as given.
func copyFlag(dst *pflag.FlagSet, f *pflag.Flag) error {
	g := dst.Lookup(f.Name)
	if g == nil {
		return nil
	}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if dv, ok := g.Value.(pflag.SliceValue); ok {
			g.Changed = true
			return dv.Replace(sv.GetSlice())
		}
	}
	return dst.Set(f.Name, f.Value.String())
}

// Validate checks every setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s: %w", flag, fmt.Sprintf(format, args...), ErrInvalid))
	}
	if c.SyncPeriod <= 0 {
		bad("ipvs-sync-period", "%v must be positive", c.SyncPeriod)
	}
	if c.MinSyncPeriod < 0 {
		bad("ipvs-min-sync-period", "%v must not be negative", c.MinSyncPeriod)
	}
	if c.SyncPeriod > 0 && c.MinSyncPeriod > c.SyncPeriod {
		bad("ipvs-min-sync-period", "%v is longer than --ipvs-sync-period %v", c.MinSyncPeriod, c.SyncPeriod)
	}
	for flag, d := range map[string]time.Duration{"ipvs-tcp-timeout": c.IPVSTCPTimeout, "ipvs-tcpfin-timeout": c.IPVSTCPFinTimeout, "ipvs-udp-timeout": c.IPVSUDPTimeout, "ipvs-graceful-period": c.IPVSGracefulPeriod} {
		if d < 0 {
			bad(flag, "%v must not be negative", d)
		}
	}
	if c.Planning.MasqueradeBit < 0 || c.Planning.MasqueradeBit > 31 {
		bad("iptables-masquerade-bit", "%d is not in 0..31", c.Planning.MasqueradeBit)
	}
	if c.Planning.Scheduler == "" {
		bad("ipvs-scheduler", "must not be empty")
	}
	if c.Planning.MaxVirtualServersPerService < 1 {
		bad("max-virtual-servers-per-service", "%d must be at least 1", c.Planning.MaxVirtualServersPerService)
	}
	if c.Planning.MaxRealServersPerService < 1 {
		bad("max-real-servers-per-service", "%d must be at least 1", c.Planning.MaxRealServersPerService)
	}
	for flag, addr := range map[string]string{"healthz-bind-address": c.HealthzBindAddress, "metrics-bind-address": c.MetricsBindAddress} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(flag, "%v", err)
		}
	}
	if c.EnableProfiling && c.MetricsBindAddress == "" {
		bad("profiling", "profiles are served on the metrics server, and --metrics-bind-address is empty")
	}
	if c.ServiceStats.MaxSeries < 1 {
		bad("service-stats-max-series", "%d must be at least 1", c.ServiceStats.MaxSeries)
	}
	if c.StateDir == "" {
		bad("state-dir", "must not be empty")
	}
	if c.DeletedNodeGrace < 0 {
		bad("deleted-node-grace-period", "%v must not be negative", c.DeletedNodeGrace)
	}
	switch c.LogFormat {
	case "json", "console", "text":
	default:
		bad("logging-format", "%q is neither json nor text (console)", c.LogFormat)
	}
	if c.Verbosity < 0 {
		bad("v", "%d must not be negative", c.Verbosity)
	}
	if _, err := ParseServiceNames(c.CriticalServices); err != nil {
		bad("critical-services", "%v", err)
	}
	errs = append(errs, c.KubeProxy.validate()...)
	return errors.Join(errs...)
}

// ParseCIDRs parses CIDRs ("10.0.0.0/8", "fd00::/64"); a bare address is a
// /32 or /128. Blank entries are skipped. IPv4-mapped IPv6 CIDRs are read
// as the IPv4 CIDRs they map, as ParseCIDR does.
func ParseCIDRs(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, err := netip.ParsePrefix(s); err != nil {
			if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
				s = netip.PrefixFrom(a, a.BitLen()).String()
			}
		}
		p, err := ParseCIDR(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ErrMappedPrefix is wrapped by ParseCIDR for an IPv4-mapped IPv6 CIDR
// shorter than /96.
var ErrMappedPrefix = errors.New("an IPv4-mapped IPv6 CIDR shorter than /96 covers IPv6 addresses that are not IPv4-mapped: write the IPv4 CIDR")

// ParseCIDR parses one CIDR, masked. An IPv4-mapped IPv6 CIDR
// (::ffff:192.0.2.0/120) is the IPv4 CIDR it maps (192.0.2.0/24): the
// kernel and the guard see IPv4 addresses only as IPv4, so taken as
// written it would protect, exclude or match nothing. One shorter than /96
// is rejected (ErrMappedPrefix).
func ParseCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8 or fd00::/64)", s)
	}
	u, ok := guard.UnmapPrefix(p)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%q: %w", s, ErrMappedPrefix)
	}
	return u.Masked(), nil
}
