package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxy "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
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
	// MaxVirtualServersPerService is --max-virtual-servers-per-service.
	MaxVirtualServersPerService *int         `json:"maxVirtualServersPerService,omitempty"`
	StateDir                    *string      `json:"stateDir,omitempty"`
	DeletedNodeGrace            *v1.Duration `json:"deletedNodeGracePeriod,omitempty"`
	// EventsLeaseNamespace is --events-lease-namespace.
	EventsLeaseNamespace *string          `json:"eventsLeaseNamespace,omitempty"`
	Logging              *LoggingSettings `json:"logging,omitempty"`
	// KubeAPI is --kube-api-qps, --kube-api-burst, --kube-api-content-type.
	KubeAPI *KubeAPISettings `json:"kubeAPI,omitempty"`
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
func setPorts(s setter, flag string, dst *[]guard.PortRange, v []string) {
	if v == nil || (s.fs != nil && s.fs.Changed(flag)) {
		return
	}
	p, err := guard.ParsePortRanges(strings.Join(v, ","))
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
		var kp kubeproxy.KubeProxyConfiguration
		if err := yaml.Unmarshal(data, &kp); err != nil {
			return fmt.Errorf("--config %s: %v: %w", path, err, ErrInvalid)
		}
		raw := map[string]any{}
		if err := yaml.Unmarshal(data, &raw); err != nil {
			return fmt.Errorf("--config %s: %v: %w", path, err, ErrInvalid)
		}
		c.applyKubeProxy(&kp, st)
		c.Warnings = append(c.Warnings, kubeProxyIgnored(&kp, raw)...)
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
	set(s, "max-virtual-servers-per-service", &c.Planning.MaxVirtualServersPerService, pc.MaxVirtualServersPerService)
	set(s, "state-dir", &c.StateDir, pc.StateDir)
	setDuration(s, "deleted-node-grace-period", &c.DeletedNodeGrace, pc.DeletedNodeGrace)
	set(s, "events-lease-namespace", &c.EventsLeaseNamespace, pc.EventsLeaseNamespace)
	if l := pc.Logging; l != nil {
		set(s, "log-level", &c.LogLevel, l.Level)
		set(s, "logging-format", &c.LogFormat, l.Format)
		set(s, "v", &c.Verbosity, l.Verbosity)
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

// nonEmpty returns a pointer to v, or nil for the zero value: an unset
// KubeProxyConfiguration field keeps the flag's value.
func nonEmpty[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func nonZeroDuration(d v1.Duration) *v1.Duration {
	if d.Duration == 0 {
		return nil
	}
	return &d
}

// kubeProxyUsed are the KubeProxyConfiguration fields (JSON paths) that
// ipvs-proxy maps onto its own settings; every other set field is named in
// a startup warning.
var kubeProxyUsed = map[string]bool{
	"apiVersion": true, "kind": true,
	"clientConnection.kubeconfig": true,
	"hostnameOverride":            true,
	"healthzBindAddress":          true,
	"metricsBindAddress":          true,
	"enableProfiling":             true,
	"mode":                        true,
	"clusterCIDR":                 true,
	"nodePortAddresses":           true,
	"ipvs.scheduler":              true,
	"ipvs.strictARP":              true,
	"ipvs.excludeCIDRs":           true,
	"ipvs.tcpTimeout":             true,
	"ipvs.tcpFinTimeout":          true,
	"ipvs.udpTimeout":             true,
	"ipvs.syncPeriod":             true,
	"ipvs.minSyncPeriod":          true,
	"iptables.masqueradeAll":      true,
	"iptables.masqueradeBit":      true,
}

func (c *Config) applyKubeProxy(kp *kubeproxy.KubeProxyConfiguration, s setter) {
	set(s, "kubeconfig", &c.Kubeconfig, nonEmpty(kp.ClientConnection.Kubeconfig))
	set(s, "hostname-override", &c.HostnameOverride, nonEmpty(kp.HostnameOverride))
	set(s, "healthz-bind-address", &c.HealthzBindAddress, nonEmpty(kp.HealthzBindAddress))
	set(s, "metrics-bind-address", &c.MetricsBindAddress, nonEmpty(kp.MetricsBindAddress))
	set(s, "profiling", &c.EnableProfiling, nonEmpty(kp.EnableProfiling))
	if kp.ClusterCIDR != "" {
		setPrefixes(s, "cluster-cidr", &c.Planning.ClusterCIDRs, strings.Split(kp.ClusterCIDR, ","))
	}
	var np []string
	for _, a := range kp.NodePortAddresses {
		// "primary" (the node's primary IPs) has no equivalent here: every
		// local address is used, and the warning says so.
		if a != "primary" {
			np = append(np, a)
		}
	}
	if len(np) > 0 {
		setPrefixes(s, "nodeport-addresses", &c.Planning.NodePortAddresses, np)
	}
	set(s, "ipvs-scheduler", &c.Planning.Scheduler, nonEmpty(kp.IPVS.Scheduler))
	set(s, "ipvs-strict-arp", &c.IPVSStrictARP, nonEmpty(kp.IPVS.StrictARP))
	if len(kp.IPVS.ExcludeCIDRs) > 0 {
		setPrefixes(s, "ipvs-exclude-cidrs", &c.Planning.ExcludeCIDRs, kp.IPVS.ExcludeCIDRs)
	}
	setDuration(s, "ipvs-tcp-timeout", &c.IPVSTCPTimeout, nonZeroDuration(kp.IPVS.TCPTimeout))
	setDuration(s, "ipvs-tcpfin-timeout", &c.IPVSTCPFinTimeout, nonZeroDuration(kp.IPVS.TCPFinTimeout))
	setDuration(s, "ipvs-udp-timeout", &c.IPVSUDPTimeout, nonZeroDuration(kp.IPVS.UDPTimeout))
	setDuration(s, "sync-period", &c.SyncPeriod, nonZeroDuration(kp.IPVS.SyncPeriod))
	setDuration(s, "min-sync-period", &c.MinSyncPeriod, nonZeroDuration(kp.IPVS.MinSyncPeriod))
	set(s, "masquerade-all", &c.Planning.MasqueradeAll, nonEmpty(kp.IPTables.MasqueradeAll))
	if kp.IPTables.MasqueradeBit != nil {
		bit := int(*kp.IPTables.MasqueradeBit)
		set(s, "masquerade-bit", &c.Planning.MasqueradeBit, &bit)
	}
}

// kubeProxyIgnored names every field set in the file that ipvs-proxy does not use.
func kubeProxyIgnored(kp *kubeproxy.KubeProxyConfiguration, raw map[string]any) []string {
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, vv := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, vv)
			}
			return
		}
		if kubeProxyUsed[prefix] || isZero(v) {
			return
		}
		out = append(out, prefix)
	}
	walk("", raw)
	if m := string(kp.Mode); m != "" && m != "ipvs" {
		out = append(out, fmt.Sprintf("mode (%q: ipvs-proxy always programs IPVS)", m))
	}
	for _, a := range kp.NodePortAddresses {
		if a == "primary" {
			out = append(out, `nodePortAddresses "primary" (every local address is used instead)`)
		}
	}
	sort.Strings(out)
	return out
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == "" || x == "0s"
	case bool:
		return !x
	case float64:
		return x == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	b, _ := json.Marshal(v)
	return strings.TrimSpace(string(b)) == ""
}
