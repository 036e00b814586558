//go:build linux

package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// ipvsNode is a node filesystem whose kernel has ip_vs and ip_vs_rr loaded.
var ipvsNode = fstest.MapFS{
	"proc/sys/kernel/osrelease": {Data: []byte("6.12.0\n")},
	"proc/modules":              {Data: []byte("ip_vs_rr 12288 0 - Live 0x0\nip_vs 200704 2 ip_vs_rr, Live 0x0\n")},
}

// useNode makes the IPVS check read root.
func useNode(t *testing.T, root fstest.MapFS) {
	t.Helper()
	old := preflightRoot
	preflightRoot = root
	t.Cleanup(func() { preflightRoot = old })
}

// apiServer answers every request with status (200: empty lists).
func apiServer(t *testing.T, status int) string {
	t.Helper()
	if status == http.StatusOK {
		return emptyCluster(t)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"refused","reason":%q,"code":%d}`,
			map[int]string{401: "Unauthorized", 403: "Forbidden"}[status], status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// unreachable is an address nothing listens on.
func unreachable(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

// TestInitOnlyTellsTheTruth: --init-only says a node can be served only
// when it can: each problem run would meet is named on one line with its
// exit status (issue 39, item 5).
func TestInitOnlyTellsTheTruth(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string { return writeFile(t, dir, name, data) }
	misspelt := write("misspelt.conf", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  schedular: sh\nclusterCIRD: 10.244.0.0/16\n")
	ownMisspelt := write("own.yaml", "apiVersion: ipvs-proxy.io/v1alpha1\nkind: ProxyConfiguration\nclusterCIRD: 10.244.0.0/16\n")
	nftables := write("nftables.conf", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n")
	noIPVS := fstest.MapFS{"proc/sys/kernel/osrelease": {Data: []byte("6.12.0\n")}, "proc/modules": {Data: []byte("nf_tables 1 0 - Live 0x0\n")}}
	for _, tc := range []struct {
		name string
		args []string
		node fstest.MapFS
		code int
		want string
	}{
		{"fit", []string{"--master", apiServer(t, 200)}, ipvsNode, exitOK, ""},
		{"unreachable API server is a warning", []string{"--master", unreachable(t)}, ipvsNode, exitOK, ""},
		{"unknown KubeProxyConfiguration fields", []string{"--config", misspelt, "--master", apiServer(t, 200)}, ipvsNode, exitUsage,
			"unknown field(s) clusterCIRD, ipvs.schedular"},
		{"unknown own field", []string{"--config", ownMisspelt, "--master", apiServer(t, 200)}, ipvsNode, exitUsage, `unknown field "clusterCIRD"`},
		{"kubeconfig unreadable", []string{"--kubeconfig", filepath.Join(dir, "nope.conf")}, ipvsNode, exitUsage, "nope.conf"},
		{"credentials refused", []string{"--master", apiServer(t, 401)}, ipvsNode, exitFailure, "the API server refuses the credentials: list Services"},
		{"list forbidden", []string{"--master", apiServer(t, 403)}, ipvsNode, exitFailure, "the API server refuses the credentials"},
		{"no IPVS", []string{"--master", apiServer(t, 200)}, noIPVS, exitFailure, "the kernel has no IPVS: ip_vs and ip_vs_rr"},
		{"no scheduler module", []string{"--master", apiServer(t, 200), "--ipvs-scheduler", "mh"}, ipvsNode, exitFailure, "ip_vs_mh neither loaded"},
		{"mode nftables", []string{"--config", nftables, "--master", apiServer(t, 200)}, ipvsNode, exitUsage, `mode "nftables"`},
		{"proxy mode iptables", []string{"--proxy-mode", "iptables", "--master", apiServer(t, 200)}, ipvsNode, exitUsage, `--proxy-mode: "iptables"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useNode(t, tc.node)
			var stdout, stderr bytes.Buffer
			code := Main(append([]string{"run", "--init-only", "--log-level=error"}, tc.args...), nil, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want it to name %q", code, tc.code, stderr.String(), tc.want)
			}
		})
	}
}

// TestWriteConfigRefusesUnknownFields: --write-config-to does not turn a
// misspelt field into a default silently.
func TestWriteConfigRefusesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.conf"), filepath.Join(dir, "out.yaml")
	if err := os.WriteFile(in, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nclusterCIRD: 10.244.0.0/16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := Main([]string{"run", "--config", in, "--write-config-to", out}, nil, new(bytes.Buffer), &stderr); code != exitUsage || !strings.Contains(stderr.String(), "clusterCIRD") {
		t.Fatalf("exit %d, stderr %q; want %d naming clusterCIRD", code, stderr.String(), exitUsage)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("--write-config-to wrote a configuration with a misspelt field dropped")
	}
}
