package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// The proxy's own configuration kind.
const (
	APIVersion = "ipvs-proxy.io/v1alpha1"
	Kind       = "ProxyConfiguration"

	kubeProxyAPIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	kubeProxyKind       = "KubeProxyConfiguration"
)

// ProxyConfiguration is the --config file's own kind. Every field is
// optional; a field left out keeps the flag's value. Durations are Go
// durations ("30s", "15m").
//
//	apiVersion: ipvs-proxy.io/v1alpha1
//	kind: ProxyConfiguration
//	clusterCIDR: 10.244.0.0/16
//	refuseNodeExternalIPs: true
//	ipvs: {scheduler: rr, strictARP: true}
type ProxyConfiguration struct {
	v1.TypeMeta `json:",inline"`

	Kubeconfig            *string       `json:"kubeconfig,omitempty"`
	Master                *string       `json:"master,omitempty"`
	HostnameOverride      *string       `json:"hostnameOverride,omitempty"`
	ClusterCIDR           *string       `json:"clusterCIDR,omitempty"`
	NodePortAddresses     []string      `json:"nodePortAddresses,omitempty"`
	IPVS                  *IPVSSettings `json:"ipvs,omitempty"`
	MasqueradeAll         *bool         `json:"masqueradeAll,omitempty"`
	MasqueradeBit         *int          `json:"masqueradeBit,omitempty"`
	SyncPeriod            *v1.Duration  `json:"syncPeriod,omitempty"`
	MinSyncPeriod         *v1.Duration  `json:"minSyncPeriod,omitempty"`
	HealthzBindAddress    *string       `json:"healthzBindAddress,omitempty"`
	MetricsBindAddress    *string       `json:"metricsBindAddress,omitempty"`
	EnableProfiling       *bool         `json:"enableProfiling,omitempty"`
	RefuseNodeExternalIPs *bool         `json:"refuseNodeExternalIPs,omitempty"`
	ProtectedCIDRs        []string      `json:"protectedCIDRs,omitempty"`
	ProtectedNodePorts    []string      `json:"protectedNodePorts,omitempty"`
	// ServiceCIDRs is --service-cidrs, ProtectedPlatformCIDRs
	// --protected-platform-cidrs, NodeEndpointNamespaces
	// --node-endpoint-namespaces.
	ServiceCIDRs           []string `json:"serviceCIDRs,omitempty"`
	ProtectedPlatformCIDRs []string `json:"protectedPlatformCIDRs,omitempty"`
	NodeEndpointNamespaces []string `json:"nodeEndpointNamespaces,omitempty"`
	// CriticalServices is --critical-services.
	CriticalServices []string `json:"criticalServices,omitempty"`
	// MaxVirtualServersPerService is --max-virtual-servers-per-service,
	// MaxRealServersPerService --max-real-servers-per-service.
	MaxVirtualServersPerService *int         `json:"maxVirtualServersPerService,omitempty"`
	MaxRealServersPerService    *int         `json:"maxRealServersPerService,omitempty"`
	StateDir                    *string      `json:"stateDir,omitempty"`
	DeletedNodeGrace            *v1.Duration `json:"deletedNodeGracePeriod,omitempty"`
	// EventsLeaseNamespace is --events-lease-namespace.
	EventsLeaseNamespace *string `json:"eventsLeaseNamespace,omitempty"`
	// StrictARPVIPs is --strict-arp-vips.
	StrictARPVIPs *bool `json:"strictARPVIPs,omitempty"`
	// ServiceStats is the --service-stats* flags.
	ServiceStats *ServiceStatsSettings `json:"serviceStats,omitempty"`
	Logging      *LoggingSettings      `json:"logging,omitempty"`
	// KubeAPI is --kube-api-qps, --kube-api-burst, --kube-api-content-type.
	KubeAPI *KubeAPISettings `json:"kubeAPI,omitempty"`
	// Conntrack is the --conntrack-* flags.
	Conntrack *ConntrackSettings `json:"conntrack,omitempty"`
}

// ConntrackSettings are the conntrack: section of ProxyConfiguration, as
// kube-proxy's.
type ConntrackSettings struct {
	MaxPerCore            *int32       `json:"maxPerCore,omitempty"`
	Min                   *int32       `json:"min,omitempty"`
	TCPEstablishedTimeout *v1.Duration `json:"tcpEstablishedTimeout,omitempty"`
	TCPCloseWaitTimeout   *v1.Duration `json:"tcpCloseWaitTimeout,omitempty"`
	TCPBeLiberal          *bool        `json:"tcpBeLiberal,omitempty"`
	UDPTimeout            *v1.Duration `json:"udpTimeout,omitempty"`
	UDPStreamTimeout      *v1.Duration `json:"udpStreamTimeout,omitempty"`
}

// KubeAPISettings are the kubeAPI: section of ProxyConfiguration: the API
// client's rate limit and encoding.
type KubeAPISettings struct {
	QPS         *float32 `json:"qps,omitempty"`
	Burst       *int32   `json:"burst,omitempty"`
	ContentType *string  `json:"contentType,omitempty"`
}

// IPVSSettings are the ipvs: section of ProxyConfiguration.
type IPVSSettings struct {
	Scheduler      *string      `json:"scheduler,omitempty"`
	StrictARP      *bool        `json:"strictARP,omitempty"`
	ExcludeCIDRs   []string     `json:"excludeCIDRs,omitempty"`
	TCPTimeout     *v1.Duration `json:"tcpTimeout,omitempty"`
	TCPFinTimeout  *v1.Duration `json:"tcpFinTimeout,omitempty"`
	UDPTimeout     *v1.Duration `json:"udpTimeout,omitempty"`
	GracefulPeriod *v1.Duration `json:"gracefulPeriod,omitempty"`
}

// LoggingSettings are the logging: section of ProxyConfiguration.
type LoggingSettings struct {
	Level     *string `json:"level,omitempty"`
	Format    *string `json:"format,omitempty"`
	Verbosity *int    `json:"verbosity,omitempty"`
}

// setter assigns one file value unless its flag was given on the command line.
type setter struct {
	fs   *pflag.FlagSet
	errs *[]error
}

// setPrefixes parses CIDRs from the file into dst.
func setPrefixes(s setter, flag string, dst *[]netip.Prefix, v []string) {
	if v == nil || (s.fs != nil && s.fs.Changed(flag)) {
		return
	}
	p, err := ParseCIDRs(v)
	if err != nil {
		*s.errs = append(*s.errs, fmt.Errorf("%s: %v: %w", flag, err, ErrInvalid))
		return
	}
	*dst = p
}

// setPorts parses ports and port ranges from the file into dst.
func setPorts(s setter, flag string, dst *[]model.PortRange, v []string) {
	if v == nil || (s.fs != nil && s.fs.Changed(flag)) {
		return
	}
	p, err := model.ParsePortRanges(strings.Join(v, ","))
	if err != nil {
		*s.errs = append(*s.errs, fmt.Errorf("%s: %v: %w", flag, err, ErrInvalid))
		return
	}
	*dst = p
}

// splitComma splits kube-proxy's comma-separated clusterCIDR.
func splitComma(v *string) []string {
	if v == nil {
		return nil
	}
	return strings.Split(*v, ",")
}

func set[T any](s setter, flag string, dst *T, v *T) {
	if v == nil || (s.fs != nil && s.fs.Changed(flag)) {
		return
	}
	*dst = *v
}

func setSlice(s setter, flag string, dst *[]string, v []string) {
	if v == nil || (s.fs != nil && s.fs.Changed(flag)) {
		return
	}
	*dst = append([]string(nil), v...)
}

func setDuration(s setter, flag string, dst *time.Duration, v *v1.Duration) {
	if v == nil {
		return
	}
	set(s, flag, dst, &v.Duration)
}

func (c *Config) loadFile(path string, fs *pflag.FlagSet) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var tm v1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return fmt.Errorf("--config %s: %v: %w", path, err, ErrInvalid)
	}
	var errs []error
	st := setter{fs, &errs}
	switch {
	case tm.APIVersion == APIVersion && tm.Kind == Kind:
		var pc ProxyConfiguration
		if err := yaml.UnmarshalStrict(data, &pc); err != nil {
			return fmt.Errorf("--config %s: %v: %w", path, err, ErrInvalid)
		}
		c.applyOwn(&pc, st)
	case tm.APIVersion == kubeProxyAPIVersion && tm.Kind == kubeProxyKind:
		if err := c.loadKubeProxy(data, st); err != nil {
			return fmt.Errorf("--config %s: %w", path, err)
		}
	default:
		return fmt.Errorf("--config %s: apiVersion %q kind %q: want %s %s or %s %s: %w",
			path, tm.APIVersion, tm.Kind, APIVersion, Kind, kubeProxyAPIVersion, kubeProxyKind, ErrInvalid)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	return nil
}

func (c *Config) applyOwn(pc *ProxyConfiguration, s setter) {
	set(s, "kubeconfig", &c.Kubeconfig, pc.Kubeconfig)
	set(s, "master", &c.Master, pc.Master)
	set(s, "hostname-override", &c.HostnameOverride, pc.HostnameOverride)
	setPrefixes(s, "cluster-cidr", &c.Planning.ClusterCIDRs, splitComma(pc.ClusterCIDR))
	setNodePortAddrs(s, &c.Planning, pc.NodePortAddresses)
	if v := pc.IPVS; v != nil {
		set(s, "ipvs-scheduler", &c.Planning.Scheduler, v.Scheduler)
		set(s, "ipvs-strict-arp", &c.IPVSStrictARP, v.StrictARP)
		setPrefixes(s, "ipvs-exclude-cidrs", &c.Planning.ExcludeCIDRs, v.ExcludeCIDRs)
		setDuration(s, "ipvs-tcp-timeout", &c.IPVSTCPTimeout, v.TCPTimeout)
		setDuration(s, "ipvs-tcpfin-timeout", &c.IPVSTCPFinTimeout, v.TCPFinTimeout)
		setDuration(s, "ipvs-udp-timeout", &c.IPVSUDPTimeout, v.UDPTimeout)
		setDuration(s, "ipvs-graceful-period", &c.IPVSGracefulPeriod, v.GracefulPeriod)
	}
	set(s, "masquerade-all", &c.Planning.MasqueradeAll, pc.MasqueradeAll)
	set(s, "iptables-masquerade-bit", &c.Planning.MasqueradeBit, pc.MasqueradeBit)
	setDuration(s, "ipvs-sync-period", &c.SyncPeriod, pc.SyncPeriod)
	setDuration(s, "ipvs-min-sync-period", &c.MinSyncPeriod, pc.MinSyncPeriod)
	set(s, "healthz-bind-address", &c.HealthzBindAddress, pc.HealthzBindAddress)
	set(s, "metrics-bind-address", &c.MetricsBindAddress, pc.MetricsBindAddress)
	set(s, "profiling", &c.EnableProfiling, pc.EnableProfiling)
	set(s, "refuse-node-external-ips", &c.Planning.RefuseNodeExternalIPs, pc.RefuseNodeExternalIPs)
	setPrefixes(s, "protected-cidrs", &c.Planning.ProtectedCIDRs, pc.ProtectedCIDRs)
	setPorts(s, "protected-node-ports", &c.Planning.ProtectedNodePorts, pc.ProtectedNodePorts)
	setPrefixes(s, "service-cidrs", &c.Planning.ServiceCIDRs, pc.ServiceCIDRs)
	setPrefixes(s, "protected-platform-cidrs", &c.Planning.PlatformCIDRs, pc.ProtectedPlatformCIDRs)
	setSlice(s, "node-endpoint-namespaces", &c.Planning.NodeEndpointNamespaces, pc.NodeEndpointNamespaces)
	setSlice(s, "critical-services", &c.CriticalServices, pc.CriticalServices)
	set(s, "max-virtual-servers-per-service", &c.Planning.MaxVirtualServersPerService, pc.MaxVirtualServersPerService)
	set(s, "max-real-servers-per-service", &c.Planning.MaxRealServersPerService, pc.MaxRealServersPerService)
	set(s, "state-dir", &c.StateDir, pc.StateDir)
	setDuration(s, "deleted-node-grace-period", &c.DeletedNodeGrace, pc.DeletedNodeGrace)
	set(s, "events-lease-namespace", &c.EventsLeaseNamespace, pc.EventsLeaseNamespace)
	set(s, "strict-arp-vips", &c.StrictARPVIPs, pc.StrictARPVIPs)
	c.ServiceStats.apply(pc.ServiceStats, s)
	if l := pc.Logging; l != nil {
		set(s, "log-level", &c.LogLevel, l.Level)
		set(s, "logging-format", &c.LogFormat, l.Format)
		set(s, "v", &c.Verbosity, l.Verbosity)
	}
	if t := pc.Conntrack; t != nil {
		ct := &c.KubeProxy.Conntrack
		set(s, "conntrack-max-per-core", &ct.MaxPerCore, t.MaxPerCore)
		set(s, "conntrack-min", &ct.Min, t.Min)
		setDuration(s, "conntrack-tcp-timeout-established", &ct.TCPEstablishedTimeout, t.TCPEstablishedTimeout)
		setDuration(s, "conntrack-tcp-timeout-close-wait", &ct.TCPCloseWaitTimeout, t.TCPCloseWaitTimeout)
		set(s, "conntrack-tcp-be-liberal", &ct.TCPBeLiberal, t.TCPBeLiberal)
		setDuration(s, "conntrack-udp-timeout", &ct.UDPTimeout, t.UDPTimeout)
		setDuration(s, "conntrack-udp-timeout-stream", &ct.UDPStreamTimeout, t.UDPStreamTimeout)
	}
	if a := pc.KubeAPI; a != nil {
		set(s, "kube-api-qps", &c.KubeProxy.KubeAPIQPS, a.QPS)
		set(s, "kube-api-burst", &c.KubeProxy.KubeAPIBurst, a.Burst)
		set(s, "kube-api-content-type", &c.KubeProxy.KubeAPIContentType, a.ContentType)
	}
}

// setNodePortAddrs reads nodePortAddresses: CIDRs, or the one value
// "primary" (the node's primary IPs), as kube-proxy reads it.
func setNodePortAddrs(s setter, o *planner.Options, v []string) {
	if v == nil || (s.fs != nil && s.fs.Changed("nodeport-addresses")) {
		return
	}
	if slices.Contains(v, planner.NodePortPrimary) {
		if len(v) > 1 {
			*s.errs = append(*s.errs, fmt.Errorf("nodePortAddresses %v: %w: %w", v, ErrPrimaryWithCIDRs, ErrInvalid))
			return
		}
		o.NodePortPrimary, o.NodePortAddresses = true, nil
		return
	}
	setPrefixes(s, "nodeport-addresses", &o.NodePortAddresses, v)
}
