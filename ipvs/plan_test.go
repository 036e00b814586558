package ipvs

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

func TestAppendSave(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name string
		vs   VirtualServer
		want string
	}{
		{"tcp", VirtualServer{Key: Key{model.TCP, a("10.96.0.10"), 80}, Scheduler: "rr",
			RealServers: []RealServer{{a("10.244.1.5"), 8080, 1}}},
			"-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1\n"},
		{"persistent", VirtualServer{Key: Key{model.TCP, a("10.96.0.10"), 80}, Scheduler: "rr", Flags: FlagPersistent, PersistenceTimeout: 10800},
			"-A -t 10.96.0.10:80 -s rr -p 10800\n"},
		{"udp ipv6", VirtualServer{Key: Key{model.UDP, a("fd00::1"), 53}, Scheduler: "wrr",
			RealServers: []RealServer{{a("fd00:1::5"), 5353, 1}}},
			"-A -u [fd00::1]:53 -s wrr\n-a -u [fd00::1]:53 -r [fd00:1::5]:5353 -m -w 1\n"},
		{"sctp", VirtualServer{Key: Key{model.SCTP, a("10.96.0.12"), 9}, Scheduler: "lc"},
			"-A --sctp-service 10.96.0.12:9 -s lc\n"},
		{"mh persistent: -p before -b as ipvsadm 1.31 prints", VirtualServer{Key: Key{model.TCP, a("10.96.0.13"), 443}, Scheduler: "mh",
			Flags: FlagPersistent | SchedulerFlags("mh"), PersistenceTimeout: 60},
			"-A -t 10.96.0.13:443 -s mh -p 60 -b mh-fallback,mh-port\n"},
		{"sh flags", VirtualServer{Key: Key{model.TCP, a("10.96.0.14"), 1}, Scheduler: "sh", Flags: FlagSchedSH1 | FlagSchedSH2},
			"-A -t 10.96.0.14:1 -s sh -b sh-fallback,sh-port\n"},
		{"other scheduler flags", VirtualServer{Key: Key{model.TCP, a("10.96.0.15"), 1}, Scheduler: "rr", Flags: FlagSchedSH2 | 0x20},
			"-A -t 10.96.0.15:1 -s rr -b flag-2,flag-3\n"},
	}
	for _, tt := range tests {
		if got := string(AppendSave(nil, &tt.vs)); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

func TestSortAndWriteSave(t *testing.T) {
	a := netip.MustParseAddr
	vss := []VirtualServer{
		{Key: Key{model.UDP, a("fd00::1"), 53}, Scheduler: "rr"},
		{Key: Key{model.UDP, a("10.96.0.10"), 53}, Scheduler: "rr"},
		{Key: Key{model.TCP, a("10.96.0.10"), 53}, Scheduler: "rr", RealServers: []RealServer{{a("10.0.0.2"), 53, 1}, {a("10.0.0.10"), 53, 1}, {a("10.0.0.2"), 5, 1}}},
		{Key: Key{model.TCP, a("10.96.0.9"), 8080}, Scheduler: "rr"},
	}
	Sort(vss)
	var b bytes.Buffer
	if err := WriteSave(&b, vss); err != nil {
		t.Fatal(err)
	}
	want := `-A -t 10.96.0.9:8080 -s rr
-A -t 10.96.0.10:53 -s rr
-a -t 10.96.0.10:53 -r 10.0.0.2:5 -m -w 1
-a -t 10.96.0.10:53 -r 10.0.0.2:53 -m -w 1
-a -t 10.96.0.10:53 -r 10.0.0.10:53 -m -w 1
-A -u 10.96.0.10:53 -s rr
-A -u [fd00::1]:53 -s rr
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestKnownScheduler(t *testing.T) {
	for _, s := range []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "mh", "fo", "ovf"} {
		if !KnownScheduler(s) {
			t.Errorf("%s unknown", s)
		}
	}
	for _, s := range []string{"", "twos", "RR", "rr ", "random"} {
		if KnownScheduler(s) {
			t.Errorf("%q known", s)
		}
	}
	if SchedulerFlags("rr") != 0 || SchedulerFlags("sh") != 0 {
		t.Error("only mh gets scheduler flags")
	}
	if got := AppendSchedulerFlags(nil, "mh", SchedulerFlags("mh")); string(got) != "mh-fallback,mh-port" {
		t.Errorf("mh defaults: -b %s, want mh-fallback,mh-port: a quiesced real server drops connections without mh-fallback", got)
	}
}
