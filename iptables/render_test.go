package iptables_test

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

func TestAppendEntry(t *testing.T) {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	tests := []struct {
		typ  string
		e    iptables.Entry
		want string
	}{
		{iptables.TypeBitmapPort, iptables.Entry{Port: 30080}, "30080"},
		{iptables.TypeHashIP, iptables.Entry{IP: a("10.96.0.10")}, "10.96.0.10"},
		{iptables.TypeHashIP, iptables.Entry{IP: a("fd00::a")}, "fd00::a"},
		{iptables.TypeHashIPPort, iptables.Entry{IP: a("10.96.0.10"), Protocol: model.TCP, Port: 80}, "10.96.0.10,tcp:80"},
		{iptables.TypeHashIPPort, iptables.Entry{IP: a("fd00::a"), Protocol: model.UDP, Port: 53}, "fd00::a,udp:53"},
		{iptables.TypeHashIPPort, iptables.Entry{IP: a("10.10.0.1"), Protocol: model.SCTP, Port: 30003}, "10.10.0.1,sctp:30003"},
		{iptables.TypeHashIPPortIP, iptables.Entry{IP: a("10.244.1.5"), Protocol: model.TCP, Port: 8080, Net: p("10.244.1.5/32")}, "10.244.1.5,tcp:8080,10.244.1.5"},
		{iptables.TypeHashIPPortNet, iptables.Entry{IP: a("203.0.113.7"), Protocol: model.TCP, Port: 80, Net: p("10.0.0.0/8")}, "203.0.113.7,tcp:80,10.0.0.0/8"},
		{iptables.TypeHashIPPortNet, iptables.Entry{IP: a("203.0.113.7"), Protocol: model.TCP, Port: 80, Net: p("192.0.2.1/32")}, "203.0.113.7,tcp:80,192.0.2.1"},
		{iptables.TypeHashIPPortNet, iptables.Entry{IP: a("fd00::7"), Protocol: model.TCP, Port: 80, Net: p("fd00:1::/64")}, "fd00::7,tcp:80,fd00:1::/64"},
	}
	for _, tt := range tests {
		if got := string(iptables.AppendEntry(nil, tt.typ, tt.e)); got != tt.want {
			t.Errorf("AppendEntry(%s, %+v) = %q, want %q", tt.typ, tt.e, got, tt.want)
		}
	}
}

func TestAppendSave(t *testing.T) {
	sets := iptables.EmptySets(iptables.FamilyIPv6)
	for i := range sets {
		switch sets[i].Name {
		case "KUBE-6-CLUSTER-IP":
			sets[i].Entries = iptables.SortEntries([]iptables.Entry{
				{IP: netip.MustParseAddr("fd00::b"), Protocol: model.TCP, Port: 80},
				{IP: netip.MustParseAddr("fd00::a"), Protocol: model.UDP, Port: 53},
				{IP: netip.MustParseAddr("fd00::a"), Protocol: model.TCP, Port: 53},
				{IP: netip.MustParseAddr("fd00::b"), Protocol: model.TCP, Port: 80},
			})
		case "KUBE-6-NODE-PORT-TCP":
			sets[i].Entries = []iptables.Entry{{Port: 30080}}
		}
	}
	got := string(iptables.AppendSave(nil, sets))
	for _, want := range []string{
		"create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536\nadd KUBE-6-CLUSTER-IP fd00::a,tcp:53\nadd KUBE-6-CLUSTER-IP fd00::a,udp:53\nadd KUBE-6-CLUSTER-IP fd00::b,tcp:80\ncreate ",
		"create KUBE-6-NODE-PORT-TCP bitmap:port range 0-65535\nadd KUBE-6-NODE-PORT-TCP 30080\n",
		"create KUBE-6-LOAD-BALANCER-SOURCE-CID hash:ip,port,net family inet6",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ipset save lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "create ") != len(iptables.SetSpecs) {
		t.Errorf("want %d sets", len(iptables.SetSpecs))
	}
}

func TestSetName(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"KUBE-CLUSTER-IP", iptables.FamilyIPv4}:                "KUBE-CLUSTER-IP",
		{"KUBE-CLUSTER-IP", iptables.FamilyIPv6}:                "KUBE-6-CLUSTER-IP",
		{"KUBE-LOAD-BALANCER-SOURCE-CIDR", iptables.FamilyIPv6}: "KUBE-6-LOAD-BALANCER-SOURCE-CID",
		{"KUBE-NODE-PORT-LOCAL-SCTP-HASH", iptables.FamilyIPv6}: "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS",
		{"OTHER", iptables.FamilyIPv6}:                          "OTHER",
	} {
		if got := iptables.SetName(in[0], in[1]); got != want {
			t.Errorf("SetName(%v) = %q, want %q", in, got, want)
		}
	}
	for _, s := range iptables.SetSpecs {
		if n := iptables.SetName(s.Name, iptables.FamilyIPv6); len(n) > 31 {
			t.Errorf("%s too long", n)
		}
	}
}

func TestAppendRule(t *testing.T) {
	tests := []struct {
		r    iptables.Rule
		want string
	}{
		{iptables.Rule{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}, `-A C -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
		{iptables.Rule{"-m", "comment", "--comment", "bare_word-1", "-j", "X"}, `-A C -m comment --comment bare_word-1 -j X`},
		{iptables.Rule{"-m", "comment", "--comment", `say "hi" \ it's`, "-j", "X"}, `-A C -m comment --comment "say \"hi\" \\ it\'s" -j X`},
		{iptables.Rule{"-m", "comment", "--comment", "", "-j", "X"}, `-A C -m comment --comment "" -j X`},
		{iptables.Rule{"-s", "127.0.0.0/8", "-j", "RETURN"}, `-A C -s 127.0.0.0/8 -j RETURN`},
	}
	for _, tt := range tests {
		if got := string(iptables.AppendRule(nil, "C", tt.r)); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

func TestRules(t *testing.T) {
	rs := iptables.Rules(iptables.RulesConfig{Family: iptables.FamilyIPv6, MasqueradeBit: 14, ClusterCIDR: netip.MustParsePrefix("fd00:1::/64")})
	got := string(iptables.AppendRestore(nil, &rs))
	for _, want := range []string{
		"*nat\n:KUBE-LOAD-BALANCER - [0:0]\n",
		"-A KUBE-SERVICES -s ::1/128 -j RETURN\n",
		"-A KUBE-SERVICES ! -s fd00:1::/64 -m comment",
		"--match-set KUBE-6-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ\n",
		"-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-6-IPVS-IPS dst -j REJECT --reject-with icmp6-port-unreachable\n",
		"-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n",
		"COMMIT\n*filter\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, ":PREROUTING") || strings.Contains(got, "KUBE-CLUSTER-IP ") {
		t.Error("built-in chains are not declared; IPv6 rules match IPv6 sets only")
	}
	// Every set a rule matches exists.
	names := map[string]bool{}
	for _, s := range iptables.EmptySets(iptables.FamilyIPv6) {
		names[s.Name] = true
	}
	for _, tb := range rs.Tables {
		for _, c := range tb.Chains {
			for _, r := range c.Rules {
				for i, a := range r {
					if a == "--match-set" && !names[r[i+1]] {
						t.Errorf("rule matches unknown set %s", r[i+1])
					}
				}
			}
		}
	}
	rs4 := iptables.Rules(iptables.RulesConfig{Family: iptables.FamilyIPv4, MasqueradeBit: 14, NodePortAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}})
	got = string(iptables.AppendRestore(nil, &rs4))
	if !strings.Contains(got, "-A KUBE-SERVICES -d 10.0.0.1/32 -j KUBE-NODE-PORT\n") || strings.Contains(got, "--dst-type LOCAL -j KUBE-NODE-PORT") {
		t.Errorf("NodePort jump per address:\n%s", got)
	}
	if iptables.MasqueradeMark(14) != "0x4000" || iptables.MasqueradeMark(0) != "0x1" || iptables.MasqueradeMark(99) != "0x4000" {
		t.Error("MasqueradeMark")
	}
}

// TestRulesDocumented checks that docs/rules.md documents every set and chain.
func TestRulesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range iptables.SetSpecs {
		if !strings.Contains(string(doc), "`"+s.Name+"`") && !strings.Contains(string(doc), "`"+s.Name[:strings.LastIndex(s.Name, "-")]) {
			t.Errorf("docs/rules.md does not document set %s", s.Name)
		}
	}
	rs := iptables.Rules(iptables.RulesConfig{Family: iptables.FamilyIPv4, MasqueradeBit: 14})
	for _, tb := range rs.Tables {
		for _, c := range tb.Chains {
			if !strings.Contains(string(doc), "`"+c.Name+"`") {
				t.Errorf("docs/rules.md does not document chain %s", c.Name)
			}
		}
	}
}
