package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunBadInput: invalid settings of run are usage errors (exit 2, one
// line naming the flag), found before anything is opened.
func TestRunBadInput(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badFile, []byte("apiVersion: ipvs-proxy.io/v1alpha1\nkind: ProxyConfiguration\nsyncPeriod: -5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"zero sync period", []string{"run", "--sync-period", "0s"}, "--ipvs-sync-period"},
		{"min above sync", []string{"run", "--sync-period", "1s", "--min-sync-period", "2s"}, "--ipvs-min-sync-period"},
		{"log format", []string{"run", "--log-format", "xml"}, "--logging-format"},
		{"proxy mode", []string{"run", "--proxy-mode", "iptables"}, `--proxy-mode: "iptables": ipvs-proxy programs IPVS only`},
		{"proxy mode nftables", []string{"run", "--proxy-mode=nftables"}, "--proxy-mode"},
		{"detect local mode", []string{"run", "--detect-local-mode", "NodeCIDR"}, "--detect-local-mode: NodeCIDR is not supported"},
		{"unknown flag", []string{"run", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{"negative v", []string{"run", "--v=-1"}, "--v"},
		{"primary with cidrs", []string{"run", "--nodeport-addresses=10.0.0.0/8,primary"}, "primary"},
		{"scheduler", []string{"run", "--ipvs-scheduler", "fastest"}, "--ipvs-scheduler"},
		{"masquerade bit", []string{"run", "--masquerade-bit", "40"}, "masquerade-bit"},
		{"iptables masquerade bit", []string{"run", "--iptables-masquerade-bit", "40"}, "iptables-masquerade-bit"},
		{"bad cidr", []string{"run", "--cluster-cidr", "10.0.0.0/33"}, "not a CIDR"},
		{"config file", []string{"run", "--config", badFile}, "sync-period"},
		{"missing config file", []string{"run", "--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{"positional", []string{"run", "extra"}, "unknown command"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, nil, &out, &errOut)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", code, exitUsage, errOut.String())
			}
			if msg := errOut.String(); !strings.Contains(msg, tt.want) || strings.Count(msg, "\n") != 1 {
				t.Errorf("stderr %q, want one line mentioning %q", msg, tt.want)
			}
		})
	}
}
