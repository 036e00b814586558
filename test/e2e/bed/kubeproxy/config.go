package kubeproxy

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Version is the kube-proxy release the bed runs.
const Version = "v1.34.4"

// ErrNoBinary: the cached kube-proxy is missing; `make kube-proxy` builds it.
var ErrNoBinary = errors.New("kubeproxy: kube-proxy binary not built (run `make kube-proxy`)")

// Binary returns the kube-proxy to run: $KUBE_PROXY_BIN when set, else
// REPO/.cache/kube-proxy/kube-proxy-Version (scripts/build-k8s.sh).
func Binary(repoRoot string) (string, error) {
	p := os.Getenv("KUBE_PROXY_BIN")
	if p == "" {
		p = filepath.Join(repoRoot, ".cache", "kube-proxy", "kube-proxy-"+Version)
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s", ErrNoBinary, p)
	}
	return filepath.Abs(p)
}

// Addresses where the bed's kube-proxy (and ipvs-proxy after it, from the
// same file) serve healthz and metrics: kubeadm's ports, on loopback of the
// node namespace.
const (
	HealthzAddress = "127.0.0.1:10256"
	MetricsAddress = "127.0.0.1:10249"
)

// Config is what the bed sets in kube-proxy's configuration file. Fields
// kubeadm sets (bindAddress, clusterCIDR, clientConnection.kubeconfig) keep
// kubeadm's meaning; mode is ipvs, as an operator of an IPVS cluster sets it
// in the ConfigMap, unless Mode says otherwise. The bed's departures from kubeadm's file:
//
//   - healthzBindAddress and metricsBindAddress on 127.0.0.1 (kubeadm leaves
//     them empty: 0.0.0.0:10256 and 127.0.0.1:10249): the node namespace has
//     no other user of the healthz port;
//   - conntrack.maxPerCore 0 (kube-proxy's --conntrack-max-per-core=0;
//     kubeadm leaves it null, which kube-proxy defaults to 32768): a network
//     namespace other than the VM's initial one cannot write
//     net.netfilter.nf_conntrack_max (read-only there), and kube-proxy exits
//     when it fails to. 0 leaves the limit as it is, as on nodes whose
//     conntrack is tuned by sysctl.d;
//   - conntrack.tcpEstablishedTimeout and tcpCloseWaitTimeout 0s (kube-proxy
//     would default them to 24h and 1h): both are per-namespace sysctls kube-proxy
//     could write, but ipvs-proxy does not tune conntrack, and a takeover
//     test must not see kernel values change for reasons other than the
//     proxies' rules;
//   - ipvs.syncPeriod and ipvs.minSyncPeriod when set, for tests that must
//     see periodic syncs within their time budget.
type Config struct {
	// Kubeconfig is clientConnection.kubeconfig; kubeadm's is
	// /var/lib/kube-proxy/kubeconfig.conf, from the same ConfigMap.
	Kubeconfig string
	// ClusterCIDR is kubeadm's networking.podSubnet, one CIDR per family,
	// comma-separated.
	ClusterCIDR string
	// SyncPeriod and MinSyncPeriod are ipvs.syncPeriod and
	// ipvs.minSyncPeriod; zero leaves kube-proxy's defaults (30s, 0s).
	SyncPeriod, MinSyncPeriod time.Duration
	// Scheduler is ipvs.scheduler; empty is kube-proxy's default, rr.
	Scheduler string
	// Mode is mode: "iptables" or "nftables" for a node kube-proxy runs in
	// that mode; empty is ipvs.
	Mode string
}

// KubeProxyConfiguration is c as the typed object kubeadm marshals into the
// ConfigMap: only what kubeadm sets plus the bed's departures (see Config),
// everything else at its zero value, which kube-proxy defaults at load.
func (c Config) KubeProxyConfiguration() *kubeproxyconfig.KubeProxyConfiguration {
	kp := &kubeproxyconfig.KubeProxyConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		BindAddress:        "0.0.0.0",
		ClusterCIDR:        c.ClusterCIDR,
		Mode:               kubeproxyconfig.ProxyMode(cmp.Or(c.Mode, "ipvs")),
		HealthzBindAddress: HealthzAddress,
		MetricsBindAddress: MetricsAddress,
	}
	kp.ClientConnection.Kubeconfig = c.Kubeconfig
	kp.Conntrack.MaxPerCore = ptr.To[int32](0)
	kp.Conntrack.TCPEstablishedTimeout = &metav1.Duration{}
	kp.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{}
	kp.IPVS.SyncPeriod = metav1.Duration{Duration: c.SyncPeriod}
	kp.IPVS.MinSyncPeriod = metav1.Duration{Duration: c.MinSyncPeriod}
	kp.IPVS.Scheduler = c.Scheduler
	return kp
}

// WriteFile writes c as config.conf: the YAML of KubeProxyConfiguration
// with every field present, as `kubectl -n kube-system get configmap
// kube-proxy -o jsonpath='{.data.config\.conf}'` prints kubeadm's.
func (c Config) WriteFile(path string) error {
	b, err := yaml.Marshal(c.KubeProxyConfiguration())
	if err != nil {
		return fmt.Errorf("marshal kube-proxy config: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write kube-proxy config: %w", err)
	}
	return nil
}
