package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
)

// kubeProxyHelp is `kube-proxy --help` of the kube-proxy the test bed runs,
// regenerated with
//
//	make kube-proxy && .cache/kube-proxy/kube-proxy-v1.34.4 --help > cmd/ipvs-proxy/testdata/kube-proxy-v1.34.4-help.txt
const kubeProxyHelp = "testdata/kube-proxy-v1.34.4-help.txt"

// kubeadmConfig is the config.conf kubeadm v1.34 writes into the
// kube-system/kube-proxy ConfigMap (internal/config's TestKubeadmConfigShape
// proves its shape).
const kubeadmConfig = "../../internal/config/testdata/kubeadm-v1.34-config.conf"

// kubeProxyFlag is one flag of kube-proxy's --help: name, pflag type word
// and default.
type kubeProxyFlag struct{ name, typ, def string }

var kubeProxyHelpLine = regexp.MustCompile(`^\s+(?:-[a-z], )?--([a-z0-9-]+)(?: (\S+))?\s{2,}(.*)$`)

func readKubeProxyFlags(t *testing.T) []kubeProxyFlag {
	t.Helper()
	raw, err := os.ReadFile(kubeProxyHelp)
	if err != nil {
		t.Fatal(err)
	}
	var out []kubeProxyFlag
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		m := kubeProxyHelpLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] == "help" {
			continue
		}
		f := kubeProxyFlag{name: m[1], typ: m[2]}
		if d := regexp.MustCompile(`\(default (.*)\)\s*$`).FindStringSubmatch(m[3]); d != nil {
			f.def = strings.Trim(d[1], `"`)
		}
		out = append(out, f)
	}
	if len(out) < 50 {
		t.Fatalf("%s: only %d flags", kubeProxyHelp, len(out))
	}
	return out
}

// kubeProxySample is a value each kube-proxy flag is given in
// TestEveryKubeProxyFlag where its default is empty or not one run takes
// as it is.
var kubeProxySample = map[string]string{
	"bind-address": "0.0.0.0", "bind-address-hard-fail": "true", "cleanup": "true",
	"cluster-cidr": "10.244.0.0/16", "conntrack-tcp-be-liberal": "true",
	"conntrack-udp-timeout": "30s", "conntrack-udp-timeout-stream": "2m",
	"detect-local-mode": "ClusterCIDR", "feature-gates": "AllAlpha=false",
	"healthz-bind-address": "0.0.0.0:10256", "hostname-override": "node-a", "init-only": "true",
	"iptables-localhost-nodeports": "false", "iptables-masquerade-bit": "14",
	"iptables-min-sync-period": "1s", "iptables-sync-period": "30s",
	"ipvs-exclude-cidrs": "10.1.0.0/16", "ipvs-min-sync-period": "1s", "ipvs-scheduler": "wrr",
	"ipvs-strict-arp": "true", "ipvs-sync-period": "30s", "ipvs-tcp-timeout": "900s",
	"ipvs-tcpfin-timeout": "120s", "ipvs-udp-timeout": "300s", "kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf",
	"log-json-info-buffer-size": "0", "log-json-split-stream": "true", "log-text-info-buffer-size": "0",
	"log-text-split-stream": "true", "masquerade-all": "true", "master": "https://10.0.0.1:6443",
	"metrics-bind-address": "0.0.0.0:10249", "nodeport-addresses": "primary", "oom-score-adj": "-999",
	"pod-bridge-interface": "cbr0", "pod-interface-name-prefix": "veth", "profiling": "true",
	"proxy-mode": "ipvs", "show-hidden-metrics-for-version": "1.33", "v": "2", "vmodule": "proxier=4",
	"logging-format": "text",
}

// TestEveryKubeProxyFlag gives `run` every flag `kube-proxy --help` lists
// (v1.34.4, Linux), each with its default or a sample value: none is
// unknown, every value is taken, and the configuration is valid (written
// by --write-config-to instead of starting).
func TestEveryKubeProxyFlag(t *testing.T) {
	flags := readKubeProxyFlags(t)
	var names []string
	out := filepath.Join(t.TempDir(), "effective.yaml")
	args := []string{"run", "--write-config-to=" + out}
	for _, f := range flags {
		names = append(names, f.name)
		switch f.name {
		case "version", "write-config-to", "config":
			continue // they print, write or read instead of running
		}
		v, ok := kubeProxySample[f.name]
		if !ok {
			v = f.def
		}
		if v == "" {
			t.Errorf("--%s (%s): no default and no sample value: add one to kubeProxySample", f.name, f.typ)
			continue
		}
		args = append(args, "--"+f.name+"="+v)
	}
	slices.Sort(names)
	if !slices.Equal(names, config.KubeProxyFlagNames) {
		t.Errorf("config.KubeProxyFlagNames differs from %s:\n got %v\nwant %v", kubeProxyHelp, config.KubeProxyFlagNames, names)
	}
	var stdout, stderr bytes.Buffer
	if code := Main(args, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("run with every kube-proxy flag: exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("--write-config-to wrote nothing: %v", err)
	}
}

// TestKubeProxyCommandLines: the command lines kube-proxy runs with, as the
// projects that deploy it write them, start `run` unchanged (checked up to
// the start: with --write-config-to, which kube-proxy has too, run exits 0
// once the configuration is valid; --init-only would also ask the
// kubeconfig, the API server and the kernel, TestInitOnlyTellsTheTruth). The file is kubeadm's config.conf with mode
// ipvs where the project's own is not at hand.
func TestKubeProxyCommandLines(t *testing.T) {
	raw, err := os.ReadFile(kubeadmConfig)
	if err != nil {
		t.Fatal(err)
	}
	ipvsConfig := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(ipvsConfig, []byte(strings.Replace(string(raw), `mode: ""`, "mode: ipvs", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		// kubeadm v1.34 (cmd/kubeadm/app/phases/addons/proxy/manifests.go),
		// which kubespray deploys as it is:
		// /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=$(NODE_NAME)
		{"kubeadm", []string{"--config=" + kubeadmConfig, "--hostname-override=node-a"}},
		{"kubeadm ipvs", []string{"--config=" + ipvsConfig, "--hostname-override=node-a"}},
		// EKS's kube-proxy add-on: kube-proxy --v=2 --config=/var/lib/kube-proxy-config/config --hostname-override=$(NODE_NAME)
		{"eks", []string{"--v=2", "--config=" + ipvsConfig, "--hostname-override=node-a"}},
		// kops, k3s and RKE2, whose kube-proxy takes flags alone:
		// TestDistributionKubeProxyArgs, from their own files.
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(ArgsFor("/usr/local/bin/kube-proxy", tc.args), "--write-config-to="+filepath.Join(t.TempDir(), "out.yaml"))
			if code := Main(args, nil, &stdout, &stderr); code != exitOK {
				t.Fatalf("kube-proxy %s: exit %d: %s", strings.Join(tc.args, " "), code, stderr.String())
			}
		})
	}
}

// TestRunVersion: --version on the root and on run, as kube-proxy has it.
func TestRunVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"run", "--version"}, ArgsFor("kube-proxy", []string{"--version"})} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, nil, &stdout, &stderr); code != exitOK || !strings.HasPrefix(stdout.String(), "ipvs-proxy ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}

// TestWriteConfigRoundTrip: what --write-config-to writes, read back with
// --config, is the same configuration.
func TestWriteConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "1.yaml"), filepath.Join(dir, "2.yaml")
	if code := Main([]string{"run", "--write-config-to=" + first, "--ipvs-scheduler=sh", "--sync-period=20s",
		"--nodeport-addresses=primary", "--protected-cidrs=172.16.0.0/12", "--v=3", "--kube-api-qps=50",
		"--service-stats=false", "--service-stats-real-servers", "--service-stats-max-series=500", "--strict-arp-vips"}, nil, new(bytes.Buffer), new(bytes.Buffer)); code != exitOK {
		t.Fatalf("write: exit %d", code)
	}
	var stderr bytes.Buffer
	if code := Main([]string{"run", "--config=" + first, "--write-config-to=" + second}, nil, new(bytes.Buffer), &stderr); code != exitOK {
		t.Fatalf("read back: exit %d: %s", code, stderr.String())
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Errorf("read back differs:\n%s\nvs\n%s", a, b)
	}
	for _, want := range []string{"scheduler: sh", "syncPeriod: 20s", "- primary", "verbosity: 3", "qps: 50", "maxPerCore: 32768",
		"enabled: false", "realServers: true", "maxSeries: 500", "strictARPVIPs: true"} {
		if !bytes.Contains(a, []byte(want)) {
			t.Errorf("written configuration lacks %q:\n%s", want, a)
		}
	}
}
