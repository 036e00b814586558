package config

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxy "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

// kubeProxyDefaultsYAML is kube-proxy's defaulted configuration, as
// `kube-proxy-v1.34.4 --write-config-to=FILE` writes it (regenerate with
// `make kube-proxy && .cache/kube-proxy/kube-proxy-v1.34.4
// --write-config-to=internal/config/kube-proxy-v1.34.4-defaults.yaml`). A
// field whose value is kube-proxy's default is never warned about.
//
//go:embed kube-proxy-v1.34.4-defaults.yaml
var kubeProxyDefaultsYAML []byte

// kubeProxyDefaults are kubeProxyDefaultsYAML's leaves by path.
var kubeProxyDefaults = func() map[string]any {
	raw := map[string]any{}
	if err := yaml.Unmarshal(kubeProxyDefaultsYAML, &raw); err != nil {
		panic(fmt.Sprintf("kube-proxy defaults: %v", err))
	}
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, vv := range m {
				walk(join(prefix, k), vv)
			}
			return
		}
		out[prefix] = v
	}
	walk("", raw)
	return out
}()

// kubeadmValues are the values kubeadm writes that are neither zero nor
// kube-proxy's defaults (cmd/kubeadm/app/componentconfigs/kubeproxy.go:
// bindAddress "::" on an IPv6 control plane).
var kubeadmValues = map[string][]any{"bindAddress": {"0.0.0.0", "::"}}

// kubeProxyUsed are the KubeProxyConfiguration fields (JSON paths) that
// take effect here.
var kubeProxyUsed = map[string]bool{
	"apiVersion": true, "kind": true, "mode": true,
	"clientConnection.kubeconfig": true, "clientConnection.qps": true, "clientConnection.burst": true,
	"clientConnection.contentType": true,
	"hostnameOverride":             true, "healthzBindAddress": true, "metricsBindAddress": true,
	"enableProfiling": true, "clusterCIDR": true, "nodePortAddresses": true, "detectLocalMode": true,
	"ipvs.scheduler": true, "ipvs.strictARP": true, "ipvs.excludeCIDRs": true, "ipvs.tcpTimeout": true,
	"ipvs.tcpFinTimeout": true, "ipvs.udpTimeout": true, "ipvs.syncPeriod": true, "ipvs.minSyncPeriod": true,
	"iptables.masqueradeAll": true, "iptables.masqueradeBit": true,
	"logging.verbosity": true, "logging.format": true,
	"conntrack.maxPerCore": true, "conntrack.min": true, "conntrack.tcpEstablishedTimeout": true,
	"conntrack.tcpCloseWaitTimeout": true, "conntrack.tcpBeLiberal": true, "conntrack.udpTimeout": true,
	"conntrack.udpStreamTimeout": true,
}

// kubeProxyFields are the JSON paths of KubeProxyConfiguration: true for a
// leaf, false for a section; a map-typed field (featureGates) takes any key.
var kubeProxyFields = func() map[string]bool {
	out := map[string]bool{}
	addFields(reflect.TypeFor[kubeproxy.KubeProxyConfiguration](), "", out)
	return out
}()

var jsonMarshaler = reflect.TypeFor[json.Marshaler]()

func addFields(t reflect.Type, prefix string, out map[string]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" {
			addFields(ft, prefix, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		p := join(prefix, name)
		isStruct := ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(jsonMarshaler) && !ft.Implements(jsonMarshaler)
		out[p] = !isStruct
		if isStruct {
			addFields(ft, p, out)
		}
	}
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// loadKubeProxy reads kube-proxy's KubeProxyConfiguration: the fields
// that take effect here set c (unless their flag won, see setter), and a
// warning names each unknown field and each value that differs from
// kube-proxy's and kubeadm's defaults and has no effect here. A mode or
// detectLocalMode that ipvs-proxy cannot honour is an error.
func (c *Config) loadKubeProxy(data []byte, s setter) error {
	var kp kubeproxy.KubeProxyConfiguration
	if err := yaml.Unmarshal(data, &kp); err != nil {
		return fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	raw := map[string]any{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	var errs []error
	switch kp.Mode {
	case "":
		c.KubeProxyModeEmpty = s.fs == nil || !s.fs.Changed("proxy-mode")
	case proxyModeIPVS:
	default:
		errs = append(errs, fmt.Errorf("mode %q: ipvs-proxy programs IPVS only; use ipvs or leave it empty (keep kube-proxy for mode %s): %w", kp.Mode, kp.Mode, ErrInvalid))
	}
	switch kp.DetectLocalMode {
	case "", detectLocalModeClusterCIDR:
	default:
		errs = append(errs, fmt.Errorf("detectLocalMode %q: ipvs-proxy detects local traffic by clusterCIDR only (ClusterCIDR): %w", kp.DetectLocalMode, ErrInvalid))
	}
	*s.errs = append(*s.errs, errs...)
	c.applyKubeProxy(&kp, s)
	warnings, unknown := kubeProxyWarnings(raw)
	c.Warnings = append(c.Warnings, warnings...)
	c.UnknownFields = append(c.UnknownFields, unknown...)
	return nil
}

func (c *Config) applyKubeProxy(kp *kubeproxy.KubeProxyConfiguration, s setter) {
	cc := &kp.ClientConnection
	set(s, "kubeconfig", &c.Kubeconfig, nonEmpty(cc.Kubeconfig))
	set(s, "kube-api-qps", &c.KubeProxy.KubeAPIQPS, nonEmpty(cc.QPS))
	set(s, "kube-api-burst", &c.KubeProxy.KubeAPIBurst, nonEmpty(cc.Burst))
	set(s, "kube-api-content-type", &c.KubeProxy.KubeAPIContentType, nonEmpty(cc.ContentType))
	set(s, "hostname-override", &c.HostnameOverride, nonEmpty(strings.ToLower(strings.TrimSpace(kp.HostnameOverride))))
	set(s, "healthz-bind-address", &c.HealthzBindAddress, nonEmpty(kp.HealthzBindAddress))
	set(s, "metrics-bind-address", &c.MetricsBindAddress, nonEmpty(kp.MetricsBindAddress))
	set(s, "profiling", &c.EnableProfiling, nonEmpty(kp.EnableProfiling))
	set(s, "proxy-mode", &c.KubeProxy.ProxyMode, nonEmpty(string(kp.Mode)))
	set(s, "detect-local-mode", &c.KubeProxy.DetectLocalMode, nonEmpty(string(kp.DetectLocalMode)))
	if kp.ClusterCIDR != "" {
		setPrefixes(s, "cluster-cidr", &c.Planning.ClusterCIDRs, strings.Split(kp.ClusterCIDR, ","))
	}
	if len(kp.NodePortAddresses) > 0 {
		setNodePortAddrs(s, &c.Planning, kp.NodePortAddresses)
	}
	set(s, "ipvs-scheduler", &c.Planning.Scheduler, nonEmpty(kp.IPVS.Scheduler))
	set(s, "ipvs-strict-arp", &c.IPVSStrictARP, nonEmpty(kp.IPVS.StrictARP))
	if len(kp.IPVS.ExcludeCIDRs) > 0 {
		setPrefixes(s, "ipvs-exclude-cidrs", &c.Planning.ExcludeCIDRs, kp.IPVS.ExcludeCIDRs)
	}
	setDuration(s, "ipvs-tcp-timeout", &c.IPVSTCPTimeout, nonZeroDuration(kp.IPVS.TCPTimeout))
	setDuration(s, "ipvs-tcpfin-timeout", &c.IPVSTCPFinTimeout, nonZeroDuration(kp.IPVS.TCPFinTimeout))
	setDuration(s, "ipvs-udp-timeout", &c.IPVSUDPTimeout, nonZeroDuration(kp.IPVS.UDPTimeout))
	setDuration(s, "ipvs-sync-period", &c.SyncPeriod, nonZeroDuration(kp.IPVS.SyncPeriod))
	setDuration(s, "ipvs-min-sync-period", &c.MinSyncPeriod, nonZeroDuration(kp.IPVS.MinSyncPeriod))
	set(s, "masquerade-all", &c.Planning.MasqueradeAll, nonEmpty(kp.IPTables.MasqueradeAll))
	if kp.IPTables.MasqueradeBit != nil {
		bit := int(*kp.IPTables.MasqueradeBit)
		set(s, "iptables-masquerade-bit", &c.Planning.MasqueradeBit, &bit)
	}
	ct, kct := &c.KubeProxy.Conntrack, &kp.Conntrack
	set(s, "conntrack-max-per-core", &ct.MaxPerCore, kct.MaxPerCore)
	set(s, "conntrack-min", &ct.Min, kct.Min)
	if d := kct.TCPEstablishedTimeout; d != nil {
		setDuration(s, "conntrack-tcp-timeout-established", &ct.TCPEstablishedTimeout, d)
	}
	if d := kct.TCPCloseWaitTimeout; d != nil {
		setDuration(s, "conntrack-tcp-timeout-close-wait", &ct.TCPCloseWaitTimeout, d)
	}
	set(s, "conntrack-tcp-be-liberal", &ct.TCPBeLiberal, nonEmpty(kct.TCPBeLiberal))
	setDuration(s, "conntrack-udp-timeout", &ct.UDPTimeout, nonZeroDuration(kct.UDPTimeout))
	setDuration(s, "conntrack-udp-timeout-stream", &ct.UDPStreamTimeout, nonZeroDuration(kct.UDPStreamTimeout))
	set(s, "logging-format", &c.LogFormat, nonEmpty(kp.Logging.Format))
	v := int(kp.Logging.Verbosity)
	set(s, "v", &c.Verbosity, nonEmpty(v))
}

// nonEmpty returns a pointer to v, or nil for the zero value: an unset
// KubeProxyConfiguration field keeps the default.
func nonEmpty[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func nonZeroDuration(d metav1.Duration) *metav1.Duration {
	if d.Duration == 0 {
		return nil
	}
	return &d
}

// kubeProxyWarnings names every field of raw (a KubeProxyConfiguration
// read as a map) that is unknown, with its path, and every value with no
// effect here that is neither zero nor kube-proxy's or kubeadm's default;
// unknown are the unknown fields' paths alone.
func kubeProxyWarnings(raw map[string]any) (out, unknown []string) {
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		_, known := kubeProxyFields[prefix]
		if prefix != "" && !known {
			if !underMap(prefix) {
				out = append(out, prefix+" (unknown field)")
				unknown = append(unknown, prefix)
			} else if !isZero(v) {
				out = append(out, fmt.Sprintf("%s=%v (no effect in ipvs-proxy)", prefix, v))
			}
			return
		}
		if m, ok := v.(map[string]any); ok {
			// A section's fields, or a map's (featureGates) keys.
			for k, vv := range m {
				walk(join(prefix, k), vv)
			}
			return
		}
		if kubeProxyUsed[prefix] || isZero(v) || isDefault(prefix, v) {
			return
		}
		out = append(out, fmt.Sprintf("%s=%v (no effect in ipvs-proxy)", prefix, v))
	}
	walk("", raw)
	slices.Sort(out)
	slices.Sort(unknown)
	return out, unknown
}

// underMap reports whether path is a key inside a map-typed field
// (featureGates.SomeGate).
func underMap(path string) bool {
	for p := path; strings.Contains(p, "."); {
		p = p[:strings.LastIndex(p, ".")]
		if leaf, ok := kubeProxyFields[p]; ok {
			return leaf
		}
	}
	return false
}

// isDefault reports whether v is kube-proxy's default for path, or a
// value kubeadm writes there.
func isDefault(path string, v any) bool {
	if d, ok := kubeProxyDefaults[path]; ok && sameValue(d, v) {
		return true
	}
	return slices.ContainsFunc(kubeadmValues[path], func(d any) bool { return sameValue(d, v) })
}

// sameValue compares two YAML values, durations by their length ("1h" is
// "1h0m0s").
func sameValue(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	as, ok1 := a.(string)
	bs, ok2 := b.(string)
	if ok1 && ok2 {
		ad, err1 := time.ParseDuration(as)
		bd, err2 := time.ParseDuration(bs)
		return err1 == nil && err2 == nil && ad == bd
	}
	return false
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		if d, err := time.ParseDuration(x); err == nil {
			return d == 0
		}
		return x == ""
	case bool:
		return !x
	case float64:
		return x == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		for _, vv := range x {
			if !isZero(vv) {
				return false
			}
		}
		return true
	}
	return false
}
