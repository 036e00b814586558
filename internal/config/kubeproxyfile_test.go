package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	kubeproxy "k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"
)

// kubeadmConfig is the config.conf kubeadm v1.34 writes into the
// kube-system/kube-proxy ConfigMap for a cluster with
// networking.podSubnet 10.244.0.0/16.
const kubeadmConfig = "testdata/kubeadm-v1.34-config.conf"

// TestKubeadmConfigShape proves kubeadmConfig is what kubeadm writes:
// kubeadm's KubeProxyConfiguration defaulting
// (cmd/kubeadm/app/componentconfigs/kubeproxy.go: bindAddress, clusterCIDR
// from the pod subnet, clientConnection.kubeconfig) on an empty
// configuration, marshalled as kubeadm marshals it (JSON field names, to YAML).
func TestKubeadmConfigShape(t *testing.T) {
	kp := kubeproxy.KubeProxyConfiguration{}
	kp.APIVersion, kp.Kind = kubeProxyAPIVersion, kubeProxyKind
	kp.FeatureGates = map[string]bool{}
	kp.BindAddress = "0.0.0.0"
	kp.ClusterCIDR = "10.244.0.0/16"
	kp.ClientConnection.Kubeconfig = "/var/lib/kube-proxy/kubeconfig.conf"
	want, err := yaml.Marshal(kp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(kubeadmConfig)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s is not kubeadm's config.conf:\n%s\nwant\n%s", kubeadmConfig, got, want)
	}
}

// TestKubeadmConfig: kubeadm's config.conf, verbatim and with mode ipvs
// (what an IPVS cluster's kubeadm configuration adds), is read with no
// warning: each value is kube-proxy's or kubeadm's default.
func TestKubeadmConfig(t *testing.T) {
	raw, err := os.ReadFile(kubeadmConfig)
	if err != nil {
		t.Fatal(err)
	}
	ipvsMode := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(ipvsMode, []byte(strings.Replace(string(raw), `mode: ""`, "mode: ipvs", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{kubeadmConfig, ipvsMode} {
		c, err := parse(t, "--config="+file, "--hostname-override=node-a")
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(c.Warnings) != 0 || len(c.IgnoredFlags) != 0 {
			t.Errorf("%s: warnings %q, ignored flags %q", file, c.Warnings, c.IgnoredFlags)
		}
		// kubeadm's mode "" is kube-proxy's iptables mode: run says so.
		if want := file == kubeadmConfig; c.KubeProxyModeEmpty != want {
			t.Errorf("%s: KubeProxyModeEmpty %v, want %v", file, c.KubeProxyModeEmpty, want)
		}
		if c.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" || c.HostnameOverride != "node-a" ||
			!reflect.DeepEqual(c.Planning.ClusterCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) ||
			c.SyncPeriod != 30*time.Second || c.HealthzBindAddress != DefaultHealthzBindAddress ||
			c.MetricsBindAddress != DefaultMetricsBindAddress || c.Planning.MasqueradeBit != 14 ||
			c.KubeProxy.KubeAPIQPS != DefaultKubeAPIQPS || c.KubeProxy.KubeAPIContentType != DefaultKubeAPIContentType {
			t.Errorf("%s: %+v", file, c)
		}
	}
}

func writeKubeProxy(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.conf")
	doc := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + body
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubeProxyWarnings: a warning for an unknown field (with its path)
// and for a value with no effect that is not a default; none for the
// defaults or for the values that take effect.
func TestKubeProxyWarnings(t *testing.T) {
	c, err := parse(t, "--config="+writeKubeProxy(t, `
bindAddress: 0.0.0.0
oomScoreAdj: -998
conntrack: {maxPerCore: 65536, min: 131072, tcpEstablishedTimeout: 24h}
featureGates: {SomeGate: true, OtherGate: false}
ipvs: {scheduler: wrr, tcpTimout: 10s}
iptables: {syncPeriod: 30s, minSyncPeriod: 1s, localhostNodePorts: true}
logging: {flushFrequency: 5s, options: {json: {infoBufferSize: "0"}}}
winkernel: {networkName: ""}
bogus: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bogus (unknown field)",
		"featureGates.SomeGate=true (no effect in ipvs-proxy)", "ipvs.tcpTimout (unknown field)",
		"oomScoreAdj=-998 (no effect in ipvs-proxy)"}
	if !reflect.DeepEqual(c.Warnings, want) {
		t.Errorf("warnings\n got %q\nwant %q", c.Warnings, want)
	}
	if c.Planning.Scheduler != "wrr" || c.KubeProxy.Conntrack.MaxPerCore != 65536 || c.KubeProxy.Conntrack.Min != 131072 ||
		c.KubeProxy.Conntrack.TCPCloseWaitTimeout != DefaultConntrackCloseWait {
		t.Errorf("scheduler %q, conntrack %+v", c.Planning.Scheduler, c.KubeProxy.Conntrack)
	}
}

// TestKubeProxyValues: the values that take effect, kube-proxy's way.
func TestKubeProxyValues(t *testing.T) {
	c, err := parse(t, "--config="+writeKubeProxy(t, `
healthzBindAddress: 0.0.0.0
metricsBindAddress: "::"
nodePortAddresses: [primary]
detectLocalMode: ClusterCIDR
logging: {verbosity: 4, format: text}
clientConnection: {qps: 50, burst: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings %q", c.Warnings)
	}
	if c.HealthzBindAddress != "0.0.0.0:10256" || c.MetricsBindAddress != "[::]:10249" {
		t.Errorf("bare bind addresses: healthz %q metrics %q", c.HealthzBindAddress, c.MetricsBindAddress)
	}
	if !c.Planning.NodePortPrimary || len(c.Planning.NodePortAddresses) != 0 {
		t.Errorf("nodePortAddresses [primary]: %v %v", c.Planning.NodePortPrimary, c.Planning.NodePortAddresses)
	}
	if c.Verbosity != 4 || c.LogFormat != "text" || c.KubeProxy.KubeAPIQPS != 50 || c.KubeProxy.KubeAPIBurst != 100 {
		t.Errorf("logging and client: %+v", c)
	}
	// The logging flags win over the file, as in kube-proxy.
	c, err = parse(t, "--config="+writeKubeProxy(t, "logging: {verbosity: 4}\n"), "--v=1")
	if err != nil || c.Verbosity != 1 {
		t.Errorf("--v=1 beside logging.verbosity 4: %d %v", c.Verbosity, err)
	}
}

// TestKubeProxyRefused: a mode or detectLocalMode ipvs-proxy cannot
// honour stops it, naming the field.
func TestKubeProxyRefused(t *testing.T) {
	for body, want := range map[string]string{
		"mode: iptables\n":                           `mode "iptables": ipvs-proxy programs IPVS only`,
		"mode: nftables\n":                           `mode "nftables"`,
		"detectLocalMode: NodeCIDR\n":                `detectLocalMode "NodeCIDR"`,
		"detectLocalMode: BridgeInterface\n":         `detectLocalMode "BridgeInterface"`,
		"nodePortAddresses: [primary, 10.0.0.0/8]\n": "primary",
	} {
		_, err := parse(t, "--config="+writeKubeProxy(t, body))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// TestKubeProxyConntrack: every field of the file's conntrack section
// reaches --conntrack-*, and wins over kube-proxy's flags as in kube-proxy.
func TestKubeProxyConntrack(t *testing.T) {
	c, err := parse(t, "--conntrack-min=1", "--conntrack-tcp-be-liberal=false", "--config="+writeKubeProxy(t, `
conntrack: {maxPerCore: 0, min: 262144, tcpEstablishedTimeout: 2h, tcpCloseWaitTimeout: 30m, tcpBeLiberal: true,
  udpTimeout: 45s, udpStreamTimeout: 3m}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Conntrack{MaxPerCore: 0, Min: 262144, TCPEstablishedTimeout: 2 * time.Hour, TCPCloseWaitTimeout: 30 * time.Minute,
		TCPBeLiberal: true, UDPTimeout: 45 * time.Second, UDPStreamTimeout: 3 * time.Minute}
	if c.KubeProxy.Conntrack != want {
		t.Errorf("conntrack %+v, want %+v", c.KubeProxy.Conntrack, want)
	}
}
