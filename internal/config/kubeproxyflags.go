package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// KubeProxyFlags are the kube-proxy 1.34 Linux flags that the proxy's own
// flags do not already cover: `run` accepts every flag `kube-proxy --help`
// lists, so that kube-proxy's command lines start it unchanged.
type KubeProxyFlags struct {
	// ProxyMode is --proxy-mode: empty or ipvs; anything else is refused.
	ProxyMode string
	// WriteConfigTo is --write-config-to: write the effective
	// configuration there as a ProxyConfiguration and exit.
	WriteConfigTo string
	// InitOnly is --init-only: validate the configuration and exit 0 (the
	// proxy has no privileged initialisation step of its own).
	InitOnly bool
	// Version is --version: print the version and exit.
	Version bool

	// HealthzPort and MetricsPort are kube-proxy's deprecated
	// --healthz-port and --metrics-port: without --config, 0 disables the
	// server and another port completes a bind address given without one.
	HealthzPort, MetricsPort int32

	// KubeAPIQPS, KubeAPIBurst and KubeAPIContentType are
	// --kube-api-qps, --kube-api-burst and --kube-api-content-type (the
	// file's clientConnection): the API client's rate limit and encoding.
	KubeAPIQPS         float32
	KubeAPIBurst       int32
	KubeAPIContentType string

	// DetectLocalMode is --detect-local-mode: empty or ClusterCIDR (local
	// traffic is traffic from --cluster-cidr); the other modes are refused.
	DetectLocalMode        string
	PodBridgeInterface     string
	PodInterfaceNamePrefix string

	// Conntrack holds the --conntrack-* flags.
	Conntrack Conntrack

	// sink holds the values of the flags with no effect here.
	sink noEffectValues
}

// Conntrack are kube-proxy's conntrack settings (--conntrack-*, the file's
// conntrack section), with kube-proxy's defaults.
type Conntrack struct {
	MaxPerCore            int32
	Min                   int32
	TCPEstablishedTimeout time.Duration
	TCPCloseWaitTimeout   time.Duration
	TCPBeLiberal          bool
	UDPTimeout            time.Duration
	UDPStreamTimeout      time.Duration
}

// Kube-proxy's defaults for the settings it has and the proxy's flags do
// not name otherwise (k8s.io/kubernetes pkg/proxy/apis/config/v1alpha1).
const (
	DefaultHealthzPort          = 10256
	DefaultMetricsPort          = 10249
	DefaultKubeAPIQPS           = 5
	DefaultKubeAPIBurst         = 10
	DefaultKubeAPIContentType   = "application/vnd.kubernetes.protobuf"
	DefaultConntrackMaxPerCore  = 32768
	DefaultConntrackMin         = 131072
	DefaultConntrackEstablished = 24 * time.Hour
	DefaultConntrackCloseWait   = time.Hour
	detectLocalModeClusterCIDR  = "ClusterCIDR"
	proxyModeIPVS               = "ipvs"
	noEffectUsagePrefix         = "kube-proxy's; accepted with no effect here: "
)

// noEffectValues are where the flags with no effect here parse to: their
// values are checked for type, then only named in one startup line.
type noEffectValues struct {
	bindAddress, bootIDFile, machineIDFile, featureGates, showHidden, vmodule string
	logJSONBuffer, logTextBuffer                                              string
	bindHardFail, localhostNodePorts, logJSONSplit, logTextSplit              bool
	configSync, iptablesSync, iptablesMinSync, logFlush                       time.Duration
	oomScoreAdj                                                               int32
}

// defaultKubeProxyFlags are the defaults Default sets.
func defaultKubeProxyFlags() KubeProxyFlags {
	return KubeProxyFlags{
		HealthzPort: DefaultHealthzPort, MetricsPort: DefaultMetricsPort,
		KubeAPIQPS: DefaultKubeAPIQPS, KubeAPIBurst: DefaultKubeAPIBurst, KubeAPIContentType: DefaultKubeAPIContentType,
		Conntrack: Conntrack{MaxPerCore: DefaultConntrackMaxPerCore, Min: DefaultConntrackMin,
			TCPEstablishedTimeout: DefaultConntrackEstablished, TCPCloseWaitTimeout: DefaultConntrackCloseWait},
	}
}

// noEffectFlags are kube-proxy's flags that mean nothing to ipvs-proxy,
// with why; `run` names the ones given in one startup line.
var noEffectFlags = map[string]string{
	"bind-address":                    "the node's primary IPs come from its Node object",
	"bind-address-hard-fail":          "a server that cannot bind is logged; the proxy keeps programming",
	"boot-id-file":                    "no machine identity is read",
	"machine-id-file":                 "no machine identity is read",
	"config-sync-period":              "the informers never resync: every change is a watch event",
	"feature-gates":                   "ipvs-proxy has no feature gates",
	"iptables-localhost-nodeports":    "iptables mode only",
	"iptables-sync-period":            "iptables mode only; --ipvs-sync-period is the period here",
	"iptables-min-sync-period":        "iptables mode only; --ipvs-min-sync-period is the period here",
	"log-flush-frequency":             "zap writes each line at once",
	"log-json-info-buffer-size":       "zap writes each line at once",
	"log-json-split-stream":           "every line goes to stderr",
	"log-text-info-buffer-size":       "zap writes each line at once",
	"log-text-split-stream":           "every line goes to stderr",
	"oom-score-adj":                   "set through the pod's QoS class instead",
	"show-hidden-metrics-for-version": "no metric is hidden",
	"vmodule":                         "zap has one level for the process: use --v",
}

// addFlags registers kube-proxy's flags on fs, bound to k.
func (k *KubeProxyFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.ProxyMode, "proxy-mode", k.ProxyMode, "kube-proxy's proxy mode: ipvs, or empty; any other mode is refused.")
	fs.StringVar(&k.WriteConfigTo, "write-config-to", k.WriteConfigTo, "Write the effective configuration (flags, --config and defaults) to this file as an ipvs-proxy.io/v1alpha1 ProxyConfiguration and exit.")
	fs.BoolVar(&k.InitOnly, "init-only", k.InitOnly, "Check the configuration and exit: ipvs-proxy has no initialisation step needing more privileges than run.")
	fs.BoolVar(&k.Version, "version", k.Version, "Print the version and exit.")
	fs.Int32Var(&k.HealthzPort, "healthz-port", k.HealthzPort, "The port of the health server when --healthz-bind-address has none; 0 disables it. Ignored with --config.")
	fs.Int32Var(&k.MetricsPort, "metrics-port", k.MetricsPort, "The port of the metrics server when --metrics-bind-address has none; 0 disables it. Ignored with --config.")
	// Hidden and deprecated, as kube-proxy has them.
	_ = fs.MarkDeprecated("healthz-port", "use --healthz-bind-address instead")
	_ = fs.MarkDeprecated("metrics-port", "use --metrics-bind-address instead")
	fs.Float32Var(&k.KubeAPIQPS, "kube-api-qps", k.KubeAPIQPS, "Queries per second to the API server.")
	fs.Int32Var(&k.KubeAPIBurst, "kube-api-burst", k.KubeAPIBurst, "Burst of queries to the API server.")
	fs.StringVar(&k.KubeAPIContentType, "kube-api-content-type", k.KubeAPIContentType, "Content type of requests to the API server.")
	fs.StringVar(&k.DetectLocalMode, "detect-local-mode", k.DetectLocalMode, "How local traffic is detected: ClusterCIDR (or empty): from --cluster-cidr. kube-proxy's NodeCIDR, BridgeInterface and InterfaceNamePrefix are refused.")
	fs.StringVar(&k.PodBridgeInterface, "pod-bridge-interface", k.PodBridgeInterface, "kube-proxy's, for --detect-local-mode BridgeInterface, which is refused; accepted alone with no effect.")
	fs.StringVar(&k.PodInterfaceNamePrefix, "pod-interface-name-prefix", k.PodInterfaceNamePrefix, "kube-proxy's, for --detect-local-mode InterfaceNamePrefix, which is refused; accepted alone with no effect.")

	ct := &k.Conntrack
	fs.Int32Var(&ct.MaxPerCore, "conntrack-max-per-core", ct.MaxPerCore, "nf_conntrack_max is this × CPUs, at least --conntrack-min; 0 leaves it (and --conntrack-min) as it is.")
	fs.Int32Var(&ct.Min, "conntrack-min", ct.Min, "The least nf_conntrack_max, whatever --conntrack-max-per-core × CPUs.")
	fs.DurationVar(&ct.TCPEstablishedTimeout, "conntrack-tcp-timeout-established", ct.TCPEstablishedTimeout, "nf_conntrack_tcp_timeout_established; 0 leaves it as it is.")
	fs.DurationVar(&ct.TCPCloseWaitTimeout, "conntrack-tcp-timeout-close-wait", ct.TCPCloseWaitTimeout, "nf_conntrack_tcp_timeout_close_wait; 0 leaves it as it is.")
	fs.BoolVar(&ct.TCPBeLiberal, "conntrack-tcp-be-liberal", ct.TCPBeLiberal, "Set nf_conntrack_tcp_be_liberal to 1.")
	fs.DurationVar(&ct.UDPTimeout, "conntrack-udp-timeout", ct.UDPTimeout, "nf_conntrack_udp_timeout (unreplied UDP); 0 leaves it as it is.")
	fs.DurationVar(&ct.UDPStreamTimeout, "conntrack-udp-timeout-stream", ct.UDPStreamTimeout, "nf_conntrack_udp_timeout_stream (assured UDP); 0 leaves it as it is.")

	s := &k.sink
	fs.StringVar(&s.bindAddress, "bind-address", "", noEffectUsage("bind-address"))
	fs.BoolVar(&s.bindHardFail, "bind-address-hard-fail", false, noEffectUsage("bind-address-hard-fail"))
	fs.StringVar(&s.bootIDFile, "boot-id-file", "", noEffectUsage("boot-id-file"))
	fs.StringVar(&s.machineIDFile, "machine-id-file", "", noEffectUsage("machine-id-file"))
	fs.DurationVar(&s.configSync, "config-sync-period", 0, noEffectUsage("config-sync-period"))
	fs.StringVar(&s.featureGates, "feature-gates", "", noEffectUsage("feature-gates"))
	fs.BoolVar(&s.localhostNodePorts, "iptables-localhost-nodeports", false, noEffectUsage("iptables-localhost-nodeports"))
	fs.DurationVar(&s.iptablesSync, "iptables-sync-period", 0, noEffectUsage("iptables-sync-period"))
	fs.DurationVar(&s.iptablesMinSync, "iptables-min-sync-period", 0, noEffectUsage("iptables-min-sync-period"))
	fs.DurationVar(&s.logFlush, "log-flush-frequency", 0, noEffectUsage("log-flush-frequency"))
	fs.StringVar(&s.logJSONBuffer, "log-json-info-buffer-size", "", noEffectUsage("log-json-info-buffer-size"))
	fs.BoolVar(&s.logJSONSplit, "log-json-split-stream", false, noEffectUsage("log-json-split-stream"))
	fs.StringVar(&s.logTextBuffer, "log-text-info-buffer-size", "", noEffectUsage("log-text-info-buffer-size"))
	fs.BoolVar(&s.logTextSplit, "log-text-split-stream", false, noEffectUsage("log-text-split-stream"))
	fs.Int32Var(&s.oomScoreAdj, "oom-score-adj", 0, noEffectUsage("oom-score-adj"))
	fs.StringVar(&s.showHidden, "show-hidden-metrics-for-version", "", noEffectUsage("show-hidden-metrics-for-version"))
	fs.StringVar(&s.vmodule, "vmodule", "", noEffectUsage("vmodule"))
}

func noEffectUsage(flag string) string { return noEffectUsagePrefix + noEffectFlags[flag] + "." }

// NoEffect names the flags given on fs's command line that have no effect
// in ipvs-proxy, with why, sorted: `run` logs them in one startup line.
// pod-bridge-interface and pod-interface-name-prefix are among them, since
// the modes that use them are refused. The flags in ignored ("--name", the
// ones --config overrides, named in their own line) are left out.
func NoEffect(fs *pflag.FlagSet, ignored []string) []string {
	var out []string
	fs.Visit(func(f *pflag.Flag) {
		if slices.Contains(ignored, "--"+f.Name) {
			return
		}
		switch why, ok := noEffectFlags[f.Name]; {
		case ok:
			out = append(out, "--"+f.Name+" ("+why+")")
		case f.Name == "pod-bridge-interface" || f.Name == "pod-interface-name-prefix":
			out = append(out, "--"+f.Name+" (only with a --detect-local-mode ipvs-proxy refuses)")
		}
	})
	slices.Sort(out)
	return out
}

// validate checks the kube-proxy flags that have a meaning here.
func (k *KubeProxyFlags) validate() []error {
	var errs []error
	bad := func(flag string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s: %w", flag, fmt.Sprintf(format, args...), ErrInvalid))
	}
	switch k.ProxyMode {
	case "", proxyModeIPVS:
	default:
		bad("proxy-mode", "%q: ipvs-proxy programs IPVS only; use ipvs or leave it empty (keep kube-proxy for mode %s)", k.ProxyMode, k.ProxyMode)
	}
	switch k.DetectLocalMode {
	case "", detectLocalModeClusterCIDR:
	case "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix":
		bad("detect-local-mode", "%s is not supported by ipvs-proxy: local traffic is traffic from --cluster-cidr (ClusterCIDR)", k.DetectLocalMode)
	default:
		bad("detect-local-mode", "%q is not a mode (ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix)", k.DetectLocalMode)
	}
	if k.KubeAPIQPS < 0 {
		bad("kube-api-qps", "%v must not be negative", k.KubeAPIQPS)
	}
	if k.KubeAPIBurst < 0 {
		bad("kube-api-burst", "%d must not be negative", k.KubeAPIBurst)
	}
	for flag, p := range map[string]int32{"healthz-port": k.HealthzPort, "metrics-port": k.MetricsPort} {
		if p < 0 || p > 65535 {
			bad(flag, "%d is not a port", p)
		}
	}
	return errs
}

// aliases are the proxy's earlier flag names, kept: each means the
// kube-proxy flag it names.
var aliases = map[string]string{
	"sync-period":     "ipvs-sync-period",
	"min-sync-period": "ipvs-min-sync-period",
	"masquerade-bit":  "iptables-masquerade-bit",
	"log-format":      "logging-format",
}

// NormalizeAliases is the pflag normalize function of `run` and `plan`:
// an earlier flag name is the kube-proxy flag it became.
func NormalizeAliases(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if n, ok := aliases[name]; ok {
		return pflag.NormalizedName(n)
	}
	return pflag.NormalizedName(name)
}

// commandLineWins are the flags kube-proxy takes from its command line even
// with --config: the logging flags, --hostname-override, and the flags with
// no field in the file. Every other kube-proxy flag is ignored when
// --config is given, as kube-proxy ignores it.
var commandLineWins = map[string]bool{
	"config": true, "write-config-to": true, "cleanup": true, "init-only": true, "version": true, "master": true,
	"hostname-override": true, "boot-id-file": true, "machine-id-file": true,
	"v": true, "vmodule": true, "logging-format": true, "log-flush-frequency": true,
	"log-json-info-buffer-size": true, "log-json-split-stream": true,
	"log-text-info-buffer-size": true, "log-text-split-stream": true,
}

// DeprecatedKubeProxyFlags are kube-proxy's flags that its --help hides
// (deprecated): `run` takes them, hidden too.
var DeprecatedKubeProxyFlags = []string{"healthz-port", "metrics-port"}

// KubeProxyFlagNames are the names `kube-proxy --help` (v1.34, Linux)
// lists, without --help: every one is a flag of `run`.
var KubeProxyFlagNames = []string{
	"bind-address", "bind-address-hard-fail", "boot-id-file", "cleanup", "cluster-cidr", "config",
	"config-sync-period", "conntrack-max-per-core", "conntrack-min", "conntrack-tcp-be-liberal",
	"conntrack-tcp-timeout-close-wait", "conntrack-tcp-timeout-established", "conntrack-udp-timeout",
	"conntrack-udp-timeout-stream", "detect-local-mode", "feature-gates", "healthz-bind-address",
	"hostname-override", "init-only", "iptables-localhost-nodeports", "iptables-masquerade-bit",
	"iptables-min-sync-period", "iptables-sync-period", "ipvs-exclude-cidrs", "ipvs-min-sync-period",
	"ipvs-scheduler", "ipvs-strict-arp", "ipvs-sync-period", "ipvs-tcp-timeout", "ipvs-tcpfin-timeout",
	"ipvs-udp-timeout", "kube-api-burst", "kube-api-content-type", "kube-api-qps", "kubeconfig",
	"log-flush-frequency", "log-json-info-buffer-size", "log-json-split-stream", "log-text-info-buffer-size",
	"log-text-split-stream", "logging-format", "machine-id-file", "masquerade-all", "master",
	"metrics-bind-address", "nodeport-addresses", "oom-score-adj", "pod-bridge-interface",
	"pod-interface-name-prefix", "profiling", "proxy-mode", "show-hidden-metrics-for-version", "v",
	"version", "vmodule", "write-config-to",
}

// fileWins reports whether a flag given on the command line is ignored
// when --config is set: a kube-proxy flag the file holds.
func fileWins(name string) bool {
	return (slices.Contains(KubeProxyFlagNames, name) || slices.Contains(DeprecatedKubeProxyFlags, name)) && !commandLineWins[name]
}

// withPort is kube-proxy's bind address completion: an address without a
// port ("0.0.0.0", "::") gets port; anything else is returned as it is.
func withPort(addr string, port int32) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(a.String(), strconv.Itoa(int(port)))
}
