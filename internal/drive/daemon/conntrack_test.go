package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
)

// TestConntrackSysctls: kube-proxy's defaults set nf_conntrack_max to
// max(32768 × cores, 131072) and the 24 h / 1 h TCP timeouts.
func TestConntrackSysctls(t *testing.T) {
	def := config.Default().KubeProxy.Conntrack
	for _, tc := range []struct {
		ct   config.Conntrack
		cpus int
		want []ipvs.Sysctl
	}{
		{def, 2, []ipvs.Sysctl{{Name: "net/netfilter/nf_conntrack_max", Value: 131072},
			{Name: "net/netfilter/nf_conntrack_tcp_timeout_established", Value: 86400},
			{Name: "net/netfilter/nf_conntrack_tcp_timeout_close_wait", Value: 3600}}},
		{def, 8, []ipvs.Sysctl{{Name: "net/netfilter/nf_conntrack_max", Value: 262144},
			{Name: "net/netfilter/nf_conntrack_tcp_timeout_established", Value: 86400},
			{Name: "net/netfilter/nf_conntrack_tcp_timeout_close_wait", Value: 3600}}},
		{config.Conntrack{MaxPerCore: 0, Min: 131072, TCPBeLiberal: true, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2 * time.Minute}, 4,
			[]ipvs.Sysctl{{Name: "net/netfilter/nf_conntrack_udp_timeout", Value: 30},
				{Name: "net/netfilter/nf_conntrack_udp_timeout_stream", Value: 120},
				{Name: "net/netfilter/nf_conntrack_tcp_be_liberal", Value: 1}}},
		{config.Conntrack{}, 4, nil},
	} {
		if got := ConntrackSysctls(tc.ct, tc.cpus); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ConntrackSysctls(%+v, %d) = %v, want %v", tc.ct, tc.cpus, got, tc.want)
		}
	}
}

func TestRaiseConntrackHashsize(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hashsize")
	for _, tc := range []struct {
		cur       string
		maxN      int
		wrote     bool
		wantAfter string
	}{
		{"16384\n", 262144, true, "65536"},
		{"65536\n", 262144, false, "65536\n"},
		{"1000\n", 0, false, "1000\n"},
	} {
		if err := os.WriteFile(f, []byte(tc.cur), 0o644); err != nil {
			t.Fatal(err)
		}
		wrote, err := raiseConntrackHashsize(f, tc.maxN)
		got, _ := os.ReadFile(f)
		if err != nil || wrote != tc.wrote || string(got) != tc.wantAfter {
			t.Errorf("hashsize %q, max %d: wrote %v (%v), file %q; want %v %q", tc.cur, tc.maxN, wrote, err, got, tc.wrote, tc.wantAfter)
		}
	}
}

// TestNoIPVS: a missing net/ipv4/vs is told apart from other sysctl errors.
func TestNoIPVS(t *testing.T) {
	root := t.TempDir()
	_, err := ipvskernel.WriteSysctls(root, []ipvs.Sysctl{{Name: "net/ipv4/vs/conntrack", Value: 1}})
	if !noIPVS(root, err) {
		t.Errorf("missing net/ipv4/vs: %v not told as no IPVS", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "net/ipv4/vs"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = ipvskernel.WriteSysctls(root, []ipvs.Sysctl{{Name: "net/ipv4/vs/conntrack", Value: 1}})
	if err == nil || noIPVS(root, err) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("present net/ipv4/vs: %v", err)
	}
}

// TestSetConntrack: nf_conntrack_max first, then hashsize raised to a
// quarter of it; a read-only nf_conntrack_max (a namespace other than the
// host's) is left with one info line, and so is hashsize, while the
// timeouts are still set.
func TestSetConntrack(t *testing.T) {
	ct := config.Conntrack{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour}
	for _, readOnlyMax := range []bool{false, true} {
		root := t.TempDir()
		nf := filepath.Join(root, "net/netfilter")
		if err := os.MkdirAll(nf, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"nf_conntrack_max": "65536\n", "nf_conntrack_tcp_timeout_established": "432000\n"} {
			if err := os.WriteFile(filepath.Join(nf, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if readOnlyMax {
			if err := os.Chmod(filepath.Join(nf, "nf_conntrack_max"), 0o444); err != nil {
				t.Fatal(err)
			}
		}
		hash := filepath.Join(root, "hashsize")
		if err := os.WriteFile(hash, []byte("16384\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zap.InfoLevel)
		changed := setConntrack(ct, 8, root, hash, zap.New(core))
		wantMax, wantHash := "262144", "65536"
		want := []ipvs.Sysctl{{Name: "net/netfilter/nf_conntrack_max", Value: 262144},
			{Name: "net/netfilter/nf_conntrack_tcp_timeout_established", Value: 86400}}
		if readOnlyMax {
			wantMax, wantHash, want = "65536\n", "16384\n", want[1:]
		}
		if !reflect.DeepEqual(changed, want) {
			t.Errorf("read-only max %v: changed %v, want %v", readOnlyMax, changed, want)
		}
		for file, w := range map[string]string{filepath.Join(nf, "nf_conntrack_max"): wantMax, hash: wantHash,
			filepath.Join(nf, "nf_conntrack_tcp_timeout_established"): "86400"} {
			if b, _ := os.ReadFile(file); string(b) != w {
				t.Errorf("read-only max %v: %s holds %q, want %q", readOnlyMax, file, b, w)
			}
		}
		ro := logs.FilterMessageSnippet("nf_conntrack_max is read-only").Len()
		if readOnlyMax && ro != 1 || !readOnlyMax && ro != 0 {
			t.Errorf("read-only max %v: %d read-only lines", readOnlyMax, ro)
		}
		if n := logs.FilterLevelExact(zap.WarnLevel).Len(); n != 0 {
			t.Errorf("read-only max %v: %d warnings: %v", readOnlyMax, n, logs.All())
		}
	}
}
