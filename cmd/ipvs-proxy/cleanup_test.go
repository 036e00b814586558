package main

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/recovery"
)

func TestCleanupCommand(t *testing.T) {
	old, oldFind := cleanupKernel, findProxies
	t.Cleanup(func() { cleanupKernel, findProxies = old, oldFind })
	findProxies = func(string) ([]recovery.Process, error) { return nil, nil }
	var got recovery.CleanupOptions
	for _, tc := range []struct {
		name string
		res  *recovery.CleanupResult
		err  error
		code int
		out  string
	}{
		{"everything", &recovery.CleanupResult{VirtualServersDeleted: 3, AddressesDeleted: 2, DeviceDeleted: true, Families: []string{"inet", "inet6"}}, nil, 0,
			"cleanup: 3 virtual server(s) deleted; kube-ipvs0 deleted with 2 address(es); no chain, rule or ipset of the proxy left for: inet, inet6\n"},
		{"nothing there", &recovery.CleanupResult{Families: []string{"inet", "inet6"}}, nil, 0,
			"cleanup: 0 virtual server(s) deleted; no kube-ipvs0; no chain, rule or ipset of the proxy left for: inet, inet6\n"},
		{"partial failure", &recovery.CleanupResult{VirtualServersDeleted: 1}, errors.New("cleanup failed: ipvsadm -D"), exitFailure,
			"cleanup: 1 virtual server(s) deleted; no kube-ipvs0; no chain, rule or ipset of the proxy left for: none\n"},
		{"cannot open the kernel", nil, errors.New("cleanup failed: open netlink"), exitFailure, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanupKernel = func(o recovery.CleanupOptions) (*recovery.CleanupResult, error) {
				got = o
				return tc.res, tc.err
			}
			var out, errb bytes.Buffer
			code := Main([]string{"cleanup", "--ipvs-exclude-cidrs", "10.0.0.0/8"}, nil, &out, &errb)
			if code != tc.code || out.String() != tc.out {
				t.Errorf("exit %d, stdout %q; want %d, %q (stderr %q)", code, out.String(), tc.code, tc.out, errb.String())
			}
			if !slices.Equal(got.ExcludeCIDRs, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}) {
				t.Errorf("exclude CIDRs not passed: %v", got.ExcludeCIDRs)
			}
		})
	}
}

// TestCleanupOtherProxy: with kube-proxy running (a node rolled back to it),
// cleanup removes nothing and says why; --force removes anyway.
func TestCleanupOtherProxy(t *testing.T) {
	old, oldFind := cleanupKernel, findProxies
	t.Cleanup(func() { cleanupKernel, findProxies = old, oldFind })
	findProxies = func(string) ([]recovery.Process, error) {
		return []recovery.Process{{PID: 42, Name: "kube-proxy", Cmdline: "kube-proxy --config=/var/lib/kube-proxy/config.conf"}}, nil
	}
	called := false
	cleanupKernel = func(recovery.CleanupOptions) (*recovery.CleanupResult, error) {
		called = true
		return &recovery.CleanupResult{}, nil
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"cleanup"}, nil, &out, &errb); code != exitFailure || called {
		t.Fatalf("exit %d, kernel cleanup called %v; want %d and not called", code, called, exitFailure)
	}
	if want := "kube-proxy (pid 42: kube-proxy --config=/var/lib/kube-proxy/config.conf)"; !bytes.Contains(errb.Bytes(), []byte(want)) ||
		!bytes.Contains(errb.Bytes(), []byte("nothing removed")) {
		t.Errorf("stderr %q does not name %s and say nothing was removed", errb.String(), want)
	}
	out.Reset()
	if code := Main([]string{"cleanup", "--force"}, nil, &out, &errb); code != 0 || !called {
		t.Errorf("--force: exit %d, kernel cleanup called %v; want 0 and called", code, called)
	}
}

// TestCleanupWayOut: on the way out, --kube-proxy-mode says kube-proxy
// serves the node in iptables or nftables mode: a running kube-proxy is
// then no refusal and the mode reaches the kernel cleanup (which keeps the
// chains iptables mode shares); another ipvs-proxy run still is, and
// kube-proxy's IPVS mode, which serves from what cleanup removes, is a
// usage error.
func TestCleanupWayOut(t *testing.T) {
	old, oldFind := cleanupKernel, findProxies
	t.Cleanup(func() { cleanupKernel, findProxies = old, oldFind })
	running := []recovery.Process{{PID: 42, Name: "kube-proxy", Cmdline: "kube-proxy --config=/var/lib/kube-proxy/config.conf"}}
	findProxies = func(string) ([]recovery.Process, error) { return slices.Clone(running), nil }
	var got *recovery.CleanupOptions
	cleanupKernel = func(o recovery.CleanupOptions) (*recovery.CleanupResult, error) {
		got = &o
		return &recovery.CleanupResult{}, nil
	}
	var out, errb bytes.Buffer
	for _, mode := range []string{"iptables", "nftables"} {
		got = nil
		if code := Main([]string{"cleanup", "--kube-proxy-mode", mode}, nil, &out, &errb); code != 0 || got == nil || got.KubeProxyMode != mode {
			t.Errorf("--kube-proxy-mode %s with kube-proxy running: exit %d, cleanup options %+v; want 0 and the mode passed (stderr %q)", mode, code, got, errb.String())
		}
	}
	running = append(running, recovery.Process{PID: 43, Name: "ipvs-proxy", Cmdline: "ipvs-proxy run"})
	got = nil
	if code := Main([]string{"cleanup", "--kube-proxy-mode", "iptables"}, nil, &out, &errb); code != exitFailure || got != nil {
		t.Errorf("--kube-proxy-mode iptables with another ipvs-proxy running: exit %d, kernel cleanup called %v; want %d, not called", code, got != nil, exitFailure)
	}
	errb.Reset()
	if code := Main([]string{"cleanup", "--kube-proxy-mode", "ipvs"}, nil, &out, &errb); code != exitUsage || got != nil || !strings.Contains(errb.String(), "--kube-proxy-mode") {
		t.Errorf("--kube-proxy-mode ipvs: exit %d, stderr %q; want %d naming the flag, nothing removed", code, errb.String(), exitUsage)
	}
}
