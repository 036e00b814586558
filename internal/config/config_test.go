package config

import (
	"errors"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// testPlanningFlags stands in for cmd/ipvs-proxy's addPlanningFlags.
func testPlanningFlags(fs *pflag.FlagSet, o *planner.Options) {
	fs.StringVar(&o.Scheduler, "ipvs-scheduler", o.Scheduler, "")
	fs.IntVar(&o.MasqueradeBit, "masquerade-bit", o.MasqueradeBit, "")
	fs.BoolVar(&o.RefuseNodeExternalIPs, "refuse-node-external-ips", false, "")
}

func parse(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	c := Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.AddFlags(fs, testPlanningFlags)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return c, c.Complete(fs)
}

func TestDefaults(t *testing.T) {
	c, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.SyncPeriod != 30*time.Second || c.MinSyncPeriod != 0 || c.HealthzBindAddress != "0.0.0.0:10256" ||
		c.MetricsBindAddress != "127.0.0.1:10249" || c.StateDir != "/var/lib/ipvs-proxy" || c.Planning.Scheduler != "rr" ||
		c.Planning.MasqueradeBit != 14 || c.EnableProfiling {
		t.Errorf("defaults: %+v", c)
	}
}

// TestOwnFileAndFlagPrecedence: as kube-proxy, the file wins over
// kube-proxy's flags (named in IgnoredFlags); --hostname-override, the
// logging flags and the proxy's own flags win over the file.
func TestOwnFileAndFlagPrecedence(t *testing.T) {
	c, err := parse(t, "--config", "testdata/own.yaml", "--ipvs-scheduler", "sh", "--sync-period", "20s",
		"--hostname-override", "Node-B", "--logging-format", "json", "--v", "2", "--state-dir", "/tmp/y")
	if err != nil {
		t.Fatal(err)
	}
	if c.Planning.Scheduler != "lc" || c.SyncPeriod != 10*time.Second {
		t.Errorf("the file must win over kube-proxy's flags: scheduler %q sync %v", c.Planning.Scheduler, c.SyncPeriod)
	}
	if want := []string{"--ipvs-scheduler", "--ipvs-sync-period"}; !reflect.DeepEqual(c.IgnoredFlags, want) {
		t.Errorf("ignored flags %q, want %q", c.IgnoredFlags, want)
	}
	if c.HostnameOverride != "Node-B" || c.LogFormat != "json" || c.Verbosity != 2 || c.StateDir != "/tmp/y" {
		t.Errorf("--hostname-override, logging and own flags must win over the file: %+v", c)
	}
	if !c.IPVSStrictARP || c.IPVSTCPTimeout != 900*time.Second ||
		c.IPVSGracefulPeriod != time.Minute || c.MinSyncPeriod != time.Second || !c.Planning.RefuseNodeExternalIPs ||
		c.LogLevel != "debug" || !c.EnableProfiling {
		t.Errorf("file values not applied: %+v", c)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("own kind warned: %v", c.Warnings)
	}
	o := c.Planning
	want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}
	if !reflect.DeepEqual(o.ClusterCIDRs, want) || o.Scheduler != "lc" || !o.RefuseNodeExternalIPs ||
		len(o.ProtectedCIDRs) != 1 || len(o.ExcludeCIDRs) != 1 || len(o.NodePortAddresses) != 1 || o.MasqueradeBit != 14 {
		t.Errorf("planner options: %+v", o)
	}
	// The guard's round-three settings.
	if len(o.ServiceCIDRs) != 2 || !reflect.DeepEqual(o.PlatformCIDRs, []netip.Prefix{netip.MustParsePrefix("192.0.0.192/32")}) ||
		!reflect.DeepEqual(o.NodeEndpointNamespaces, []string{"monitoring"}) || o.MaxRealServersPerService != 5000 {
		t.Errorf("serviceCIDRs, protectedPlatformCIDRs, nodeEndpointNamespaces, maxRealServersPerService not applied: %v %v %v %d",
			o.ServiceCIDRs, o.PlatformCIDRs, o.NodeEndpointNamespaces, o.MaxRealServersPerService)
	}
	if want := (ServiceStats{RealServers: true, MaxSeries: 500}); c.ServiceStats != want || !c.StrictARPVIPs {
		t.Errorf("serviceStats %+v, strictARPVIPs %v: want %+v, true", c.ServiceStats, c.StrictARPVIPs, want)
	}
}

func TestKubeProxyConfiguration(t *testing.T) {
	c, err := parse(t, "--config", "testdata/kube-proxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" || c.Planning.Scheduler != "wrr" || !c.IPVSStrictARP ||
		c.SyncPeriod != 45*time.Second || !reflect.DeepEqual(c.Planning.ClusterCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) || c.MetricsBindAddress != "0.0.0.0:10249" {
		t.Errorf("kube-proxy values not applied: %+v", c)
	}
	// Every other value there is kube-proxy's default: only the field
	// kube-proxy 1.34 no longer has is named.
	want := []string{"udpIdleTimeout (unknown field)"}
	if !reflect.DeepEqual(c.Warnings, want) {
		t.Errorf("warnings\n got %q\nwant %q", c.Warnings, want)
	}
}

// kube-proxy's enableProfiling maps onto --profiling; as in kube-proxy, the
// file wins over the command line.
func TestKubeProxyProfiling(t *testing.T) {
	p := t.TempDir() + "/kp.yaml"
	if err := os.WriteFile(p, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nenableProfiling: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parse(t, "--config", p)
	if err != nil {
		t.Fatal(err)
	}
	if !c.EnableProfiling || len(c.Warnings) != 0 {
		t.Errorf("enableProfiling: %v, warnings %v", c.EnableProfiling, c.Warnings)
	}
	if c, err = parse(t, "--config", p, "--profiling=false"); err != nil || !c.EnableProfiling || len(c.IgnoredFlags) != 1 {
		t.Errorf("the file must win over --profiling=false: %v %v %v", c.EnableProfiling, c.IgnoredFlags, err)
	}
}

func TestInvalidFile(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/bad.yaml"
	if err := os.WriteFile(p, []byte("apiVersion: ipvs-proxy.io/v1alpha1\nkind: ProxyConfiguration\nprotectedCIDRs: [nonsense]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parse(t, "--config", p); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad CIDR in file: %v", err)
	}
	if err := os.WriteFile(p, []byte("apiVersion: ipvs-proxy.io/v1alpha1\nkind: ProxyConfiguration\nsyncPeriodz: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parse(t, "--config", p); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown field in own kind: %v", err)
	}
}

func TestInvalid(t *testing.T) {
	for _, args := range [][]string{
		{"--masquerade-bit", "32"},
		{"--sync-period", "0s"},
		{"--min-sync-period", "1m", "--sync-period", "30s"},
		{"--log-format", "xml"},
		{"--healthz-bind-address", "10256"},
		{"--profiling", "--metrics-bind-address", ""},
		{"--config", "testdata/missing.yaml"},
		{"--config", "config_test.go"},
	} {
		if _, err := parse(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		} else if args[0] != "--config" && !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %v does not wrap ErrInvalid", args, err)
		}
	}
}

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs([]string{"10.1.2.3", " 10.1.2.3/8", "", "fd00::1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::1/128")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v want %v", got, want)
	}
}

// TestParseCIDRMapped: an IPv4-mapped CIDR protects (or excludes) the IPv4
// addresses it maps; taken as written it matched nothing the kernel or the
// guard ever sees (issue 14, item 3). One shorter than /96 is an error.
func TestParseCIDRMapped(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:192.0.2.0/120": "192.0.2.0/24",
		"::ffff:192.0.2.9/128": "192.0.2.9/32",
		"::ffff:0.0.0.0/96":    "0.0.0.0/0",
		" 10.0.0.0/8":          "10.0.0.0/8",
		"fd00::/64":            "fd00::/64",
	} {
		got, err := ParseCIDR(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseCIDR(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	if _, err := ParseCIDR("::ffff:192.0.2.0/64"); !errors.Is(err, ErrMappedPrefix) {
		t.Errorf("ParseCIDR of a mapped /64: %v, want ErrMappedPrefix", err)
	}
	if got, err := ParseCIDRs([]string{"::ffff:192.0.2.1"}); err != nil || got[0].String() != "192.0.2.1/32" {
		t.Errorf("ParseCIDRs(mapped address) = %v, %v", got, err)
	}
}

// --max-virtual-servers-per-service: default 1,000, read from the file's
// maxVirtualServersPerService unless the flag is given, at least 1.
func TestMaxVirtualServersPerService(t *testing.T) {
	p := t.TempDir() + "/own.yaml"
	if err := os.WriteFile(p, []byte("apiVersion: ipvs-proxy.io/v1alpha1\nkind: ProxyConfiguration\nmaxVirtualServersPerService: 5000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := func(fs *pflag.FlagSet, o *planner.Options) {
		fs.IntVar(&o.MaxVirtualServersPerService, "max-virtual-servers-per-service", o.MaxVirtualServersPerService, "")
	}
	for _, tt := range []struct {
		args []string
		want int
		bad  bool
	}{
		{nil, 1000, false},
		{[]string{"--config", p}, 5000, false},
		{[]string{"--config", p, "--max-virtual-servers-per-service", "20"}, 20, false},
		{[]string{"--max-virtual-servers-per-service", "0"}, 0, true},
	} {
		c := Default()
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		c.AddFlags(fs, flags)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		err := c.Complete(fs)
		if (err != nil) != tt.bad || (tt.bad && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%v: error %v, want invalid %v", tt.args, err, tt.bad)
		}
		if c.Planning.MaxVirtualServersPerService != tt.want {
			t.Errorf("%v: %d, want %d", tt.args, c.Planning.MaxVirtualServersPerService, tt.want)
		}
	}
}

// TestDeprecatedPorts: kube-proxy's hidden --healthz-port and
// --metrics-port, and bind addresses without a port.
func TestDeprecatedPorts(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		healthz, metrics string
	}{
		{nil, "0.0.0.0:10256", "127.0.0.1:10249"},
		{[]string{"--healthz-port=0"}, "", "127.0.0.1:10249"},
		{[]string{"--metrics-bind-address=0.0.0.0", "--metrics-port=9100"}, "0.0.0.0:10256", "0.0.0.0:9100"},
		{[]string{"--healthz-bind-address=::"}, "[::]:10256", "127.0.0.1:10249"},
		{[]string{"--healthz-bind-address=10.0.0.1:1234", "--healthz-port=99"}, "10.0.0.1:1234", "127.0.0.1:10249"},
	} {
		c, err := parse(t, tc.args...)
		if err != nil || c.HealthzBindAddress != tc.healthz || c.MetricsBindAddress != tc.metrics {
			t.Errorf("%v: healthz %q metrics %q (%v), want %q %q", tc.args, c.HealthzBindAddress, c.MetricsBindAddress, err, tc.healthz, tc.metrics)
		}
	}
}

// TestNoEffect: the kube-proxy flags given that mean nothing here are
// named once, with why; those --config overrides are left to their line.
func TestNoEffect(t *testing.T) {
	c := Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.AddFlags(fs, testPlanningFlags)
	if err := fs.Parse([]string{"--oom-score-adj=-998", "--vmodule=x=2", "--ipvs-scheduler=sh", "--pod-bridge-interface=cbr0"}); err != nil {
		t.Fatal(err)
	}
	got := NoEffect(fs, []string{"--oom-score-adj"})
	want := []string{"--pod-bridge-interface (only with a --detect-local-mode ipvs-proxy refuses)",
		"--vmodule (zap has one level for the process: use --v)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NoEffect\n got %q\nwant %q", got, want)
	}
}
