package deploy

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
)

// configFiles are the --config files the DaemonSets read: the base's
// ipvs-proxy-config ConfigMap, and kubeadm's config.conf (ConfigMap
// kube-system/kube-proxy), which the overlays mount.
var configFiles = []string{
	"base/config.yaml",
	"../internal/config/testdata/kubeadm-v1.34-config.conf",
}

// TestConfigFilesLoad loads each shipped config file with the proxy's own
// loader (strict: an unknown or misspelt field is an error), requires no
// ignored-setting warnings, and checks the settings the DaemonSet depends
// on: the healthz port its probes use and the state directory it mounts.
func TestConfigFilesLoad(t *testing.T) {
	ds := readDaemonSet(t)
	probePort := ds.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Port.String()
	var stateMount string
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == "state" {
			stateMount = m.MountPath
		}
	}
	for _, f := range configFiles {
		t.Run(f, func(t *testing.T) {
			c := config.Default()
			c.ConfigFile = f
			if err := c.Complete(nil); err != nil {
				t.Fatalf("load %s: %v", f, err)
			}
			if len(c.Warnings) > 0 {
				t.Errorf("%s has settings ipvs-proxy ignores: %v", f, c.Warnings)
			}
			_, port, err := net.SplitHostPort(c.HealthzBindAddress)
			if err != nil || port != probePort {
				t.Errorf("healthzBindAddress %q, the DaemonSet probes port %s", c.HealthzBindAddress, probePort)
			}
			if c.StateDir != stateMount {
				t.Errorf("stateDir %q, the DaemonSet mounts the state volume at %q", c.StateDir, stateMount)
			}
		})
	}
}

// TestConfigFileStrict proves TestConfigFilesLoad can fail: a misspelt
// field in a copy of the base file is refused.
func TestConfigFileStrict(t *testing.T) {
	raw, err := os.ReadFile("base/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(raw), "stateDir:", "stateDirectory:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.ConfigFile = bad
	if err := c.Complete(nil); err == nil {
		t.Errorf("a config file with the unknown field stateDirectory loaded without error")
	}
}

// TestConfigFileIsMounted checks the DaemonSet reads the file where the
// ConfigMap puts it: --config names config.yaml in the config volume's
// mount, and the kustomization generates the ConfigMap from config.yaml.
func TestConfigFileIsMounted(t *testing.T) {
	ds := readDaemonSet(t)
	c := ds.Spec.Template.Spec.Containers[0]
	i := slices.Index(c.Command, "--config")
	if i < 0 || i+1 >= len(c.Command) {
		t.Fatalf("command %q has no --config", c.Command)
	}
	var mount string
	for _, m := range c.VolumeMounts {
		if m.Name == "config" {
			mount = m.MountPath
		}
	}
	if want := filepath.Join(mount, "config.yaml"); c.Command[i+1] != want {
		t.Errorf("--config %s, the ConfigMap's config.yaml is mounted at %s", c.Command[i+1], want)
	}
}

func readDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	raw, err := os.ReadFile("base/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(raw, &ds); err != nil {
		t.Fatalf("base/daemonset.yaml: %v", err)
	}
	return &ds
}

// TestConfigFileCommentedSettings: the settings base/config.yaml shows
// commented out ("# field: value", the cluster's ranges and the guard's)
// load with the proxy's own loader once uncommented, with the values they
// show: an operator who uncomments one gets what the comment says.
func TestConfigFileCommentedSettings(t *testing.T) {
	raw, err := os.ReadFile("base/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`(?m)^# ([a-z][A-Za-z]*: )`)
	if n := len(setting.FindAll(raw, -1)); n != 10 {
		t.Fatalf("%d commented settings in base/config.yaml, want 10: clusterCIDR, serviceCIDRs, the guard's 6, serviceStats and strictARPVIPs", n)
	}
	lines := setting.ReplaceAllString(string(raw), "$1")
	f := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(f, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.ConfigFile = f
	if err := c.Complete(nil); err != nil {
		t.Fatalf("base/config.yaml with its commented settings: %v", err)
	}
	def := config.Default()
	o := c.Planning
	if len(o.ClusterCIDRs) != 1 || len(o.ServiceCIDRs) != 1 || o.MaxRealServersPerService != def.Planning.MaxRealServersPerService ||
		o.MaxVirtualServersPerService != def.Planning.MaxVirtualServersPerService || len(o.ProtectedNodePorts) != 8 {
		t.Errorf("the commented settings read %+v", o)
	}
	if c.ServiceStats != def.ServiceStats || c.StrictARPVIPs != def.StrictARPVIPs {
		t.Errorf("the commented serviceStats and strictARPVIPs read %+v %v, not the defaults %+v %v",
			c.ServiceStats, c.StrictARPVIPs, def.ServiceStats, def.StrictARPVIPs)
	}
}
