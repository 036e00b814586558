package planner

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

func TestWriteTextLayout(t *testing.T) {
	sp := svc("web", "10.96.0.10")
	sp.AffinityTimeout = 10800
	dns := model.ServicePort{Name: spn("dns", "dns"), Protocol: model.UDP, Port: 53, ClusterIPs: []netip.Addr{addr("fd00:96::a")}, Scheduler: "mh"}
	c := cluster(map[model.ServicePortName][]model.Endpoint{
		sp.Name:  {ready("10.244.1.5", 8080, "n2")},
		dns.Name: {ready("fd00:1::5", 53, "n2")},
	}, sp, dns)
	c.Services[1].ExternalIPs = []netip.Addr{addr("10.10.0.2")}
	st := Plan(c, dualOpts())
	got := text(t, st)

	sections := []string{"# ipvs\n", "# kube-ipvs0\n", "# ipset\n", "# iptables\n", "# ip6tables\n", "# refused\n"}
	last := -1
	for _, s := range sections {
		i := strings.Index(got, s)
		if i <= last {
			t.Fatalf("section %q missing or out of order:\n%s", s, got)
		}
		last = i
	}
	head := "# ipvs\n" +
		"-A -t 10.96.0.10:80 -s rr -p 10800\n" +
		"-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1\n" +
		"-A -u [fd00:96::a]:53 -s mh -b mh-fallback,mh-port\n" +
		"-a -u [fd00:96::a]:53 -r [fd00:1::5]:53 -m -w 1\n" +
		"# kube-ipvs0\n10.96.0.10/32\nfd00:96::a/128\n# ipset\ncreate KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536\nadd KUBE-6-CLUSTER-IP fd00:96::a,udp:53\n"
	if !strings.HasPrefix(got, head) {
		t.Errorf("text starts\n%s\nwant\n%s", got[:min(len(got), len(head)+200)], head)
	}
	tail := "# refused\ndefault/web spec.externalIPs 10.10.0.2 NodeIP: address of node n2; binding it on kube-ipvs0 would cut every node off from it; not bound on kube-ipvs0 and not served by this node\n"
	if !strings.HasSuffix(got, tail) {
		t.Errorf("text ends\n%s\nwant\n%s", got[max(0, len(got)-300):], tail)
	}
	if strings.Count(got, "COMMIT\n") != 4 {
		t.Error("want nat and filter for each family")
	}
	if text(t, st) != got {
		t.Error("WriteText is not deterministic")
	}
}

func TestWriteJSON(t *testing.T) {
	sp := svc("web", "10.96.0.10")
	sp.AffinityTimeout = 60
	sp.ExternalIPs = []netip.Addr{addr("127.0.0.1")}
	st := Plan(cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: {ready("10.244.1.5", 8080, "n2")}}, sp), opts())
	var b bytes.Buffer
	if err := WriteJSON(&b, st); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		VirtualServers []struct {
			Protocol, Address, Scheduler, Service string
			Port                                  uint16
			Flags                                 []string
			PersistenceTimeout                    uint32
			RealServers                           []struct {
				Address      string
				Port, Weight int
			}
		}
		Addresses []string
		IPSets    map[string][]string
		IPTables  string
		Refusals  []struct{ Service, Field, Address, Reason, Message string }
	}
	dec := json.NewDecoder(bytes.NewReader(b.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(doc.VirtualServers) != 1 {
		t.Fatalf("%+v", doc.VirtualServers)
	}
	v := doc.VirtualServers[0]
	if v.Protocol != "tcp" || v.Address != "10.96.0.10" || v.Port != 80 || v.Scheduler != "rr" || v.Service != "default/web:http" ||
		len(v.Flags) != 1 || v.Flags[0] != "persistent" || v.PersistenceTimeout != 60 ||
		len(v.RealServers) != 1 || v.RealServers[0].Address != "10.244.1.5" || v.RealServers[0].Port != 8080 || v.RealServers[0].Weight != 1 {
		t.Errorf("virtual server %+v", v)
	}
	if len(doc.Addresses) != 1 || doc.Addresses[0] != "10.96.0.10/32" {
		t.Errorf("addresses %v", doc.Addresses)
	}
	if e := doc.IPSets["KUBE-CLUSTER-IP"]; len(e) != 1 || e[0] != "10.96.0.10,tcp:80" {
		t.Errorf("ipsets %v", doc.IPSets)
	}
	if es, ok := doc.IPSets["KUBE-LOAD-BALANCER"]; !ok || es == nil {
		t.Error("empty sets are [] in the document")
	}
	if !strings.HasPrefix(doc.IPTables, "*nat\n") || !strings.HasSuffix(doc.IPTables, "COMMIT\n") {
		t.Errorf("iptables %q", doc.IPTables)
	}
	if len(doc.Refusals) != 1 || doc.Refusals[0].Reason != "Loopback" || doc.Refusals[0].Address != "127.0.0.1" || doc.Refusals[0].Field != "spec.externalIPs" {
		t.Errorf("refusals %+v", doc.Refusals)
	}
	if !strings.HasSuffix(b.String(), "}\n") {
		t.Error("one document ending in a newline")
	}
}
