package config

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// File is c as a ProxyConfiguration with every field set: what
// --write-config-to writes, and what --config reads back to the same
// configuration.
func (c *Config) File() ProxyConfiguration {
	str := func(s string) *string { return &s }
	dur := func(d time.Duration) *v1.Duration { return &v1.Duration{Duration: d} }
	cidrs := func(ps []netip.Prefix) []string {
		out := []string{}
		for _, p := range ps {
			out = append(out, p.String())
		}
		return out
	}
	p := &c.Planning
	np := cidrs(p.NodePortAddresses)
	if p.NodePortPrimary {
		np = []string{planner.NodePortPrimary}
	}
	ports := []string{}
	for _, r := range p.ProtectedNodePorts {
		ports = append(ports, r.String())
	}
	k := &c.KubeProxy
	ct := &k.Conntrack
	return ProxyConfiguration{
		TypeMeta:          v1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		Kubeconfig:        str(c.Kubeconfig),
		Master:            str(c.Master),
		HostnameOverride:  str(c.HostnameOverride),
		ClusterCIDR:       str(strings.Join(cidrs(p.ClusterCIDRs), ",")),
		NodePortAddresses: np,
		IPVS: &IPVSSettings{
			Scheduler: str(p.Scheduler), StrictARP: &c.IPVSStrictARP, ExcludeCIDRs: cidrs(p.ExcludeCIDRs),
			TCPTimeout: dur(c.IPVSTCPTimeout), TCPFinTimeout: dur(c.IPVSTCPFinTimeout), UDPTimeout: dur(c.IPVSUDPTimeout),
			GracefulPeriod: dur(c.IPVSGracefulPeriod),
		},
		MasqueradeAll:               &p.MasqueradeAll,
		MasqueradeBit:               &p.MasqueradeBit,
		SyncPeriod:                  dur(c.SyncPeriod),
		MinSyncPeriod:               dur(c.MinSyncPeriod),
		HealthzBindAddress:          str(c.HealthzBindAddress),
		MetricsBindAddress:          str(c.MetricsBindAddress),
		EnableProfiling:             &c.EnableProfiling,
		RefuseNodeExternalIPs:       &p.RefuseNodeExternalIPs,
		ProtectedCIDRs:              cidrs(p.ProtectedCIDRs),
		ProtectedNodePorts:          ports,
		ServiceCIDRs:                cidrs(p.ServiceCIDRs),
		ProtectedPlatformCIDRs:      cidrs(p.PlatformCIDRs),
		NodeEndpointNamespaces:      p.NodeEndpointNamespaces,
		CriticalServices:            c.CriticalServices,
		MaxVirtualServersPerService: &p.MaxVirtualServersPerService,
		MaxRealServersPerService:    &p.MaxRealServersPerService,
		StateDir:                    str(c.StateDir),
		DeletedNodeGrace:            dur(c.DeletedNodeGrace),
		EventsLeaseNamespace:        str(c.EventsLeaseNamespace),
		StrictARPVIPs:               &c.StrictARPVIPs,
		ServiceStats:                c.ServiceStats.file(),
		Logging:                     &LoggingSettings{Level: str(c.LogLevel), Format: str(c.LogFormat), Verbosity: &c.Verbosity},
		KubeAPI: &KubeAPISettings{QPS: &k.KubeAPIQPS, Burst: &k.KubeAPIBurst,
			ContentType: str(k.KubeAPIContentType)},
		Conntrack: &ConntrackSettings{MaxPerCore: &ct.MaxPerCore, Min: &ct.Min,
			TCPEstablishedTimeout: dur(ct.TCPEstablishedTimeout), TCPCloseWaitTimeout: dur(ct.TCPCloseWaitTimeout),
			TCPBeLiberal: &ct.TCPBeLiberal, UDPTimeout: dur(ct.UDPTimeout), UDPStreamTimeout: dur(ct.UDPStreamTimeout)},
	}
}

// WriteFile writes c.File() to path as YAML (--write-config-to).
func (c *Config) WriteFile(path string) error {
	out, err := yaml.Marshal(c.File())
	if err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	return nil
}
