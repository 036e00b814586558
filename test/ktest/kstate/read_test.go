package kstate

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

func TestParseIPVSSave(t *testing.T) {
	// ipvsadm prints services in kernel hash order; the reader sorts.
	in := `-A -u [fd00:10:96::10]:53 -s rr
-a -u [fd00:10:96::10]:53 -r [fd00:10:244::2]:53 -m -w 1
-A -t 10.96.0.10:80 -s mh -p 10800 -M 255.255.255.255 -b mh-fallback,mh-port
-a -t 10.96.0.10:80 -r 10.244.0.3:8080 -m -w 1
-a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 0
-A --sctp-service 198.51.100.1:30080 -s wrr -b flag-3
`
	vss, err := parseIPVSSave(in)
	if err != nil {
		t.Fatal(err)
	}
	ipvs.Sort(vss)
	want := []ipvs.VirtualServer{
		{Key: ipvs.Key{Protocol: model.TCP, Address: netip.MustParseAddr("10.96.0.10"), Port: 80}, Scheduler: "mh",
			Flags: ipvs.FlagPersistent | ipvs.FlagSchedSH1 | ipvs.FlagSchedSH2, PersistenceTimeout: 10800,
			RealServers: []ipvs.RealServer{
				{Address: netip.MustParseAddr("10.244.0.2"), Port: 8080, Weight: 0},
				{Address: netip.MustParseAddr("10.244.0.3"), Port: 8080, Weight: 1},
			}},
		{Key: ipvs.Key{Protocol: model.SCTP, Address: netip.MustParseAddr("198.51.100.1"), Port: 30080}, Scheduler: "wrr", Flags: 0x20},
		{Key: ipvs.Key{Protocol: model.UDP, Address: netip.MustParseAddr("fd00:10:96::10"), Port: 53}, Scheduler: "rr",
			RealServers: []ipvs.RealServer{{Address: netip.MustParseAddr("fd00:10:244::2"), Port: 53, Weight: 1}}},
	}
	if got, want := ipvs.Save(vss), ipvs.Save(want); got != want {
		t.Errorf("parsed table renders differently:\n%s", Diff(want, got))
	}
	// Round trip: the renderer's own output parses back to itself.
	again, err := parseIPVSSave(ipvs.Save(want))
	if err != nil {
		t.Fatal(err)
	}
	if got := ipvs.Save(again); got != ipvs.Save(want) {
		t.Errorf("round trip:\n%s", Diff(ipvs.Save(want), got))
	}
}

func TestParseIPVSSaveRefusesWhatPlanCannotSay(t *testing.T) {
	for name, in := range map[string]string{
		"fwmark service":   "-A -f 100 -s rr\n",
		"direct routing":   "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.0.0.2:80 -g -w 1\n",
		"thresholds":       "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.0.0.2:80 -m -w 1 -x 10 -y 0\n",
		"one-packet":       "-A -u 10.0.0.1:53 -s rr -o\n",
		"partial netmask":  "-A -t 10.0.0.1:80 -s rr -p 60 -M 255.255.255.0\n",
		"orphan real":      "-a -t 10.0.0.1:80 -r 10.0.0.2:80 -m -w 1\n",
		"unknown -b flag":  "-A -t 10.0.0.1:80 -s rr -b sh-port\n",
		"no scheduler":     "-A -t 10.0.0.1:80\n",
		"duplicate server": "-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.1:80 -s rr\n",
	} {
		if _, err := parseIPVSSave(in); !errors.Is(err, ErrUnparsable) {
			t.Errorf("%s: err = %v, want ErrUnparsable", name, err)
		}
	}
}

func TestParseIPSetSave(t *testing.T) {
	in := `create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 4096 maxelem 65536 bucketsize 12 initval 0x8e0f8c2a
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
add KUBE-CLUSTER-IP 10.96.0.10,tcp:53
add KUBE-CLUSTER-IP 10.96.0.2,tcp:443
create KUBE-LOOP-BACK hash:ip,port,ip family inet6 hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1
add KUBE-LOOP-BACK fd00:10:244::2,tcp:8080,fd00:10:244::2
create KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net family inet hashsize 1024 maxelem 65536
add KUBE-LOAD-BALANCER-SOURCE-CIDR 203.0.113.7,tcp:80,10.0.0.0/8
add KUBE-LOAD-BALANCER-SOURCE-CIDR 203.0.113.7,tcp:80,192.0.2.1
create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536
`
	sets, err := parseIPSetSave(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 10.96.0.2,tcp:443
add KUBE-CLUSTER-IP 10.96.0.10,tcp:53
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536
create KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net family inet hashsize 1024 maxelem 65536
add KUBE-LOAD-BALANCER-SOURCE-CIDR 203.0.113.7,tcp:80,10.0.0.0/8
add KUBE-LOAD-BALANCER-SOURCE-CIDR 203.0.113.7,tcp:80,192.0.2.1
create KUBE-LOOP-BACK hash:ip,port,ip family inet6 hashsize 1024 maxelem 65536
add KUBE-LOOP-BACK fd00:10:244::2,tcp:8080,fd00:10:244::2
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
`
	if got := string(iptables.AppendSave(nil, sets)); got != want {
		t.Errorf("rendered:\n%s", Diff(want, got))
	}
	for name, in := range map[string]string{
		"member with timeout": "create S hash:ip family inet hashsize 1024 maxelem 65536 timeout 0\n",
		"comment option":      "create S hash:ip family inet hashsize 1024 maxelem 65536 comment\n",
		"larger maxelem":      "create S hash:ip family inet hashsize 1024 maxelem 1048576\n",
		"smaller maxelem":     "create S hash:ip family inet hashsize 1024 maxelem 1024\n",
		"member options":      "create S hash:ip family inet hashsize 1024 maxelem 65536\nadd S 10.0.0.1 timeout 5\n",
		"undeclared set":      "add S 10.0.0.1\n",
		"unknown type":        "create S hash:net family inet hashsize 1024 maxelem 65536\nadd S 10.0.0.0/8\n",
	} {
		if _, err := parseIPSetSave(in); !errors.Is(err, ErrUnparsable) {
			t.Errorf("%s: err = %v, want ErrUnparsable", name, err)
		}
	}
}

func TestParseIPTablesSaveMatchesPlanForm(t *testing.T) {
	for _, fam := range []string{iptables.FamilyIPv4, iptables.FamilyIPv6} {
		t.Run(fam, func(t *testing.T) {
			plan := iptables.Rules(iptables.RulesConfig{Family: fam, MasqueradeBit: 14})
			want := string(iptables.AppendRestore(nil, &plan))
			got, err := parseIPTablesSave(fam, fakeSave(want))
			if err != nil {
				t.Fatal(err)
			}
			if s := string(iptables.AppendRestore(nil, &got)); s != want {
				t.Errorf("save of the plan's rules reads back differently:\n%s", Diff(want, s))
			}
		})
	}
}

// fakeSave turns plan-form rules into what iptables-save prints for them:
// a header, filter before nat, every built-in chain declared with its policy
// and counters, user chains declared in another order.
func fakeSave(plan string) string {
	tables := map[string][]string{}
	var order []string
	var cur string
	for line := range strings.Lines(plan) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "*"):
			cur = line[1:]
			order = append(order, cur)
		case line == "COMMIT":
		case strings.HasPrefix(line, ":"):
			tables[cur] = append([]string{line}, tables[cur]...) // reversed
		default:
			tables[cur] = append(tables[cur], line)
		}
	}
	builtins := map[string][]string{
		"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
		"filter": {"INPUT", "FORWARD", "OUTPUT"},
		"mangle": {"PREROUTING"},
	}
	var b strings.Builder
	b.WriteString("# Generated by iptables-nft-save v1.8.9 (nf_tables) on Mon Nov 23 18:00:00 2026\n")
	for i := len(order) - 1; i >= 0; i-- {
		t := order[i]
		b.WriteString("*" + t + "\n")
		for _, c := range builtins[t] {
			b.WriteString(":" + c + " ACCEPT [12:720]\n")
		}
		for _, l := range tables[t] {
			b.WriteString(l + "\n")
		}
		b.WriteString("COMMIT\n# Completed on Mon Nov 23 18:00:00 2026\n")
	}
	// An empty table the kernel lists is no part of the plan form.
	b.WriteString("*mangle\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n")
	return b.String()
}

func TestFieldsUnquotes(t *testing.T) {
	got, err := fields(`PREROUTING -m comment --comment "say \"hi\" it\'s" -j X`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PREROUTING", "-m", "comment", "--comment", `say "hi" it's`, "-j", "X"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("fields = %q, want %q", got, want)
	}
	if _, err := fields(`-m comment --comment "open`); err == nil {
		t.Error("unterminated quote accepted")
	}
}

func TestParseIPAddrJSON(t *testing.T) {
	in := `[{"ifindex":3,"ifname":"kube-ipvs0","flags":["BROADCAST","NOARP"],"addr_info":[` +
		`{"family":"inet6","local":"fd00:10:96::10","prefixlen":128},` +
		`{"family":"inet","local":"10.96.0.10","prefixlen":32},` +
		`{"family":"inet","local":"10.96.0.2","prefixlen":32}]}]`
	ps, err := parseIPAddrJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	if want := "10.96.0.2/32 10.96.0.10/32 fd00:10:96::10/128"; strings.Join(got, " ") != want {
		t.Errorf("addresses = %v, want %s", got, want)
	}
}

func TestDiff(t *testing.T) {
	if d := Diff("a\nb\n", "a\nb\n"); d != "" {
		t.Errorf("equal texts: %q", d)
	}
	d := Diff("a\nb\n", "a\nc\n")
	if !strings.Contains(d, "- 2: b") || !strings.Contains(d, "+ 2: c") {
		t.Errorf("diff lacks the changed lines:\n%s", d)
	}
	if d := Diff("a\nb\n", "b\na\n"); !strings.Contains(d, "different order") {
		t.Errorf("reordering not reported:\n%s", d)
	}
}
