package preflight

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

// TestCheckIPVS: ip_vs and the scheduler's module count when loaded, built
// in or loadable, under any compression; a kernel with neither is
// ErrNoIPVS naming the missing modules.
func TestCheckIPVS(t *testing.T) {
	const rel = "6.12.0-1-amd64"
	node := func(files map[string]string) Kernel {
		m := fstest.MapFS{"proc/sys/kernel/osrelease": {Data: []byte(rel + "\n")}}
		for name, data := range files {
			m[name] = &fstest.MapFile{Data: []byte(data)}
		}
		return Kernel{Root: m}
	}
	dep := "lib/modules/" + rel + "/modules.dep"
	builtin := "lib/modules/" + rel + "/modules.builtin"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		missing string
	}{
		{"loaded", map[string]string{"proc/modules": "ip_vs_rr 12288 0 - Live 0x0\nip_vs 200704 2 ip_vs_rr, Live 0x0\n"}, ""},
		{"proc net and dep", map[string]string{"proc/net/ip_vs": "", dep: "kernel/net/netfilter/ipvs/ip_vs_rr.ko.xz: kernel/net/netfilter/ipvs/ip_vs.ko.xz\n"}, ""},
		{"modules", map[string]string{dep: "kernel/net/netfilter/ipvs/ip_vs.ko.zst: kernel/net/netfilter/nf_conntrack.ko.zst\nkernel/net/netfilter/ipvs/ip_vs_rr.ko.zst: kernel/net/netfilter/ipvs/ip_vs.ko.zst\n"}, ""},
		{"built in", map[string]string{builtin: "kernel/net/netfilter/ipvs/ip_vs.ko\nkernel/net/netfilter/ipvs/ip_vs_rr.ko\n"}, ""},
		{"no scheduler", map[string]string{builtin: "kernel/net/netfilter/ipvs/ip_vs.ko\n"}, "ip_vs_rr neither"},
		{"nothing", map[string]string{"proc/modules": "nf_tables 1 0 - Live 0x0\n"}, "ip_vs and ip_vs_rr neither"},
		{"no lib modules", nil, "ip_vs and ip_vs_rr neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := node(tc.files).CheckIPVS("rr")
			if tc.missing == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNoIPVS) || !strings.Contains(err.Error(), tc.missing) {
				t.Fatalf("got %v, want ErrNoIPVS naming %q", err, tc.missing)
			}
		})
	}
}
