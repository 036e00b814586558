package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
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
	_, err := ipvs.WriteSysctls(root, []ipvs.Sysctl{{Name: "net/ipv4/vs/conntrack", Value: 1}})
	if !noIPVS(root, err) {
		t.Errorf("missing net/ipv4/vs: %v not told as no IPVS", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "net/ipv4/vs"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = ipvs.WriteSysctls(root, []ipvs.Sysctl{{Name: "net/ipv4/vs/conntrack", Value: 1}})
	if err == nil || noIPVS(root, err) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("present net/ipv4/vs: %v", err)
	}
}
