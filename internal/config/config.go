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

	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// Defaults, as kube-proxy's where kube-proxy has the setting.
const (
	DefaultSyncPeriod         = 30 * time.Second
	DefaultHealthzBindAddress = "0.0.0.0:10256"
	DefaultMetricsBindAddress = "127.0.0.1:10249"
	DefaultScheduler          = "rr"
	DefaultMasqueradeBit      = 14
	DefaultStateDir           = "/var/lib/ipvs-proxy"
	DefaultGracefulPeriod     = 15 * time.Minute
)

// Config is every setting of `ipvs-proxy run`.
type Config struct {
	// ConfigFile is --config.
	ConfigFile string

	Kubeconfig       string
	Master           string
	HostnameOverride string

	// ClusterCIDR is --cluster-cidr: comma-separated pod CIDRs, one per family.
	ClusterCIDR       string
	NodePortAddresses []string

	IPVSScheduler      string
	IPVSStrictARP      bool
	IPVSExcludeCIDRs   []string
	IPVSTCPTimeout     time.Duration
	IPVSTCPFinTimeout  time.Duration
	IPVSUDPTimeout     time.Duration
	IPVSGracefulPeriod time.Duration

	MasqueradeAll bool
	MasqueradeBit int

	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration

	Cleanup bool

	HealthzBindAddress string
	MetricsBindAddress string

	RefuseNodeExternalIPs bool
	ProtectedCIDRs        []string
	StateDir              string

	LogLevel  string
	LogFormat string

	// Warnings are the settings read from --config that mean nothing to
	// ipvs-proxy; run logs them once at startup.
	Warnings []string
}

// Default returns the configuration with every default filled in.
func Default() *Config {
	return &Config{
		IPVSScheduler:      DefaultScheduler,
		IPVSGracefulPeriod: DefaultGracefulPeriod,
		MasqueradeBit:      DefaultMasqueradeBit,
		SyncPeriod:         DefaultSyncPeriod,
		HealthzBindAddress: DefaultHealthzBindAddress,
		MetricsBindAddress: DefaultMetricsBindAddress,
		StateDir:           DefaultStateDir,
		LogLevel:           "info",
		LogFormat:          "json",
	}
}

// AddFlags registers every flag of `run` on fs, bound to c.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "Configuration file: ipvs-proxy.io/v1alpha1 ProxyConfiguration, or kube-proxy's kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration. Flags given on the command line override it.")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "Path to a kubeconfig file; empty means the in-cluster configuration.")
	fs.StringVar(&c.Master, "master", c.Master, "The address of the Kubernetes API server (overrides any value in kubeconfig).")
	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "This node's name; empty means the hostname.")
	fs.StringVar(&c.ClusterCIDR, "cluster-cidr", c.ClusterCIDR, "Comma-separated pod CIDRs (one per family): never service VIPs, and the source range treated as local traffic.")
	fs.StringSliceVar(&c.NodePortAddresses, "nodeport-addresses", c.NodePortAddresses, "CIDRs of the local addresses NodePorts are served on; empty means every local address except loopback.")
	fs.StringVar(&c.IPVSScheduler, "ipvs-scheduler", c.IPVSScheduler, "Default IPVS scheduler (rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, mh); a Service may override it with the annotation ipvs-proxy.io/scheduler.")
	fs.BoolVar(&c.IPVSStrictARP, "ipvs-strict-arp", c.IPVSStrictARP, "Set arp_ignore=1 and arp_announce=2 so the node does not answer ARP for kube-ipvs0 addresses.")
	fs.StringSliceVar(&c.IPVSExcludeCIDRs, "ipvs-exclude-cidrs", c.IPVSExcludeCIDRs, "CIDRs whose IPVS virtual servers the proxy never plans, changes or deletes.")
	fs.DurationVar(&c.IPVSTCPTimeout, "ipvs-tcp-timeout", c.IPVSTCPTimeout, "IPVS idle TCP connection timeout; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVSTCPFinTimeout, "ipvs-tcpfin-timeout", c.IPVSTCPFinTimeout, "IPVS TCP FIN_WAIT timeout; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVSUDPTimeout, "ipvs-udp-timeout", c.IPVSUDPTimeout, "IPVS UDP timeout; 0 leaves the kernel's value.")
	fs.DurationVar(&c.IPVSGracefulPeriod, "ipvs-graceful-period", c.IPVSGracefulPeriod, "How long a removed TCP real server stays at weight 0 while it still has connections.")
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", c.MasqueradeAll, "Masquerade all traffic sent to service addresses.")
	fs.IntVar(&c.MasqueradeBit, "masquerade-bit", c.MasqueradeBit, "The fwmark bit (0-31) that marks packets for masquerade.")
	fs.DurationVar(&c.SyncPeriod, "sync-period", c.SyncPeriod, "How often the whole state is read back from the kernel and repaired.")
	fs.DurationVar(&c.MinSyncPeriod, "min-sync-period", c.MinSyncPeriod, "Minimum time between two applies of changes; 0 applies at once, batching what arrives during an apply.")
	fs.BoolVar(&c.Cleanup, "cleanup", c.Cleanup, "Remove what the proxy created (virtual servers, kube-ipvs0, chains, ipsets) and exit.")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "host:port of the /healthz and /livez server; empty disables it.")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "host:port of the Prometheus /metrics server; empty disables it.")
	fs.BoolVar(&c.RefuseNodeExternalIPs, "refuse-node-external-ips", c.RefuseNodeExternalIPs, "Refuse outright (no virtual server, no binding, no rule) an externalIP or LoadBalancer IP that is any node's address.")
	fs.StringSliceVar(&c.ProtectedCIDRs, "protected-cidrs", c.ProtectedCIDRs, "CIDRs that are never bound on kube-ipvs0.")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "Directory for the cached Node addresses that `recover` reads offline.")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "Log level: debug, info, warn, error.")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "Log format: json or console.")
}

// Complete reads --config (if given) into every setting whose flag was not
// set on the command line, then validates the result.
func (c *Config) Complete(fs *pflag.FlagSet) error {
	if c.ConfigFile != "" {
		if err := c.loadFile(c.ConfigFile, fs); err != nil {
			return err
		}
	}
	return c.Validate()
}

// Validate checks every setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s: %w", flag, fmt.Sprintf(format, args...), ErrInvalid))
	}
	if _, err := c.clusterCIDRs(); err != nil {
		bad("cluster-cidr", "%v", err)
	}
	if _, err := ParseCIDRs(c.NodePortAddresses); err != nil {
		bad("nodeport-addresses", "%v", err)
	}
	if _, err := ParseCIDRs(c.IPVSExcludeCIDRs); err != nil {
		bad("ipvs-exclude-cidrs", "%v", err)
	}
	if _, err := ParseCIDRs(c.ProtectedCIDRs); err != nil {
		bad("protected-cidrs", "%v", err)
	}
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		bad("masquerade-bit", "%d is not in 0..31", c.MasqueradeBit)
	}
	if c.SyncPeriod <= 0 {
		bad("sync-period", "%v must be positive", c.SyncPeriod)
	}
	if c.MinSyncPeriod < 0 {
		bad("min-sync-period", "%v must not be negative", c.MinSyncPeriod)
	}
	if c.MinSyncPeriod > c.SyncPeriod {
		bad("min-sync-period", "%v is longer than --sync-period %v", c.MinSyncPeriod, c.SyncPeriod)
	}
	for flag, d := range map[string]time.Duration{"ipvs-tcp-timeout": c.IPVSTCPTimeout, "ipvs-tcpfin-timeout": c.IPVSTCPFinTimeout, "ipvs-udp-timeout": c.IPVSUDPTimeout, "ipvs-graceful-period": c.IPVSGracefulPeriod} {
		if d < 0 {
			bad(flag, "%v must not be negative", d)
		}
	}
	if c.IPVSScheduler == "" {
		bad("ipvs-scheduler", "must not be empty")
	}
	for flag, addr := range map[string]string{"healthz-bind-address": c.HealthzBindAddress, "metrics-bind-address": c.MetricsBindAddress} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(flag, "%v", err)
		}
	}
	if c.StateDir == "" {
		bad("state-dir", "must not be empty")
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		bad("log-format", "%q is neither json nor console", c.LogFormat)
	}
	return errors.Join(errs...)
}

func (c *Config) clusterCIDRs() ([]netip.Prefix, error) {
	if strings.TrimSpace(c.ClusterCIDR) == "" {
		return nil, nil
	}
	return ParseCIDRs(strings.Split(c.ClusterCIDR, ","))
}

// ParseCIDRs parses CIDRs ("10.0.0.0/8", "fd00::/64"); a bare address is a
// /32 or /128. Blank entries are skipped.
func ParseCIDRs(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// PlannerOptions returns the planning options these settings imply. The
// node's identity and its kernel-read addresses (NodeName, LocalAddrs,
// APIServerAddrs, Gateways) are left for the caller to fill in.
func (c *Config) PlannerOptions() (planner.Options, error) {
	if err := c.Validate(); err != nil {
		return planner.Options{}, err
	}
	cc, _ := c.clusterCIDRs()
	np, _ := ParseCIDRs(c.NodePortAddresses)
	ex, _ := ParseCIDRs(c.IPVSExcludeCIDRs)
	pc, _ := ParseCIDRs(c.ProtectedCIDRs)
	return planner.Options{
		NodePortAddresses:     np,
		Scheduler:             c.IPVSScheduler,
		ClusterCIDRs:          cc,
		ProtectedCIDRs:        pc,
		ExcludeCIDRs:          ex,
		RefuseNodeExternalIPs: c.RefuseNodeExternalIPs,
		MasqueradeAll:         c.MasqueradeAll,
		MasqueradeBit:         c.MasqueradeBit,
	}, nil
}
