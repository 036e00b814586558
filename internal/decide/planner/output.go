package planner

import (
	"encoding/json"
	"io"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Section headers of the text layout.
const (
	SectionIPVS      = "# ipvs"
	SectionAddresses = "# kube-ipvs0"
	SectionIPSet     = "# ipset"
	SectionIPTables  = "# iptables"
	SectionIP6Tables = "# ip6tables"
	SectionRefused   = "# refused"
)

// AppendText appends s in the `plan` text layout (see WriteText).
func AppendText(b []byte, s State) []byte {
	b = append(b, SectionIPVS+"\n"...)
	for i := range s.VirtualServers {
		b = ipvs.AppendSave(b, &s.VirtualServers[i])
	}
	b = append(b, SectionAddresses+"\n"...)
	for _, a := range s.Addresses {
		b = a.AppendTo(b)
		b = append(b, '\n')
	}
	b = append(b, SectionIPSet+"\n"...)
	b = iptables.AppendSave(b, s.IPSets)
	b = append(b, SectionIPTables+"\n"...)
	b = appendRulesets(b, s.Rulesets)
	b = append(b, SectionRefused+"\n"...)
	for _, r := range s.Refusals {
		b = append(b, r.String()...)
		b = append(b, '\n')
	}
	return b
}

// appendRulesets appends the IPv4 ruleset, then "# ip6tables" and the IPv6
// one when there is one.
func appendRulesets(b []byte, rss []iptables.Ruleset) []byte {
	for i := range rss {
		if rss[i].Family == iptables.FamilyIPv4 {
			b = iptables.AppendRestore(b, &rss[i])
		}
	}
	for i := range rss {
		if rss[i].Family == iptables.FamilyIPv6 {
			b = append(b, SectionIP6Tables+"\n"...)
			b = iptables.AppendRestore(b, &rss[i])
		}
	}
	return b
}

// WriteText writes s in the `plan` text layout, byte-for-byte deterministic:
//
//	# ipvs          `ipvsadm -S -n` lines: each -A line followed by its -a
//	                lines; virtual servers by address, port, protocol; real
//	                servers by address, port (ipvsadm -S itself prints
//	                services in kernel hash order: sort before comparing)
//	# kube-ipvs0    one ADDR/32 or ADDR/128 per line, sorted
//	# ipset         `ipset save` form: per set (by name) its create line,
//	                then its sorted add lines
//	# iptables      iptables-save form, *nat then *filter, each ending COMMIT
//	# ip6tables     the same for IPv6, only when the node plans IPv6
//	# refused       model.Refusal.String() lines, sorted
func WriteText(w io.Writer, s State) error {
	_, err := w.Write(AppendText(make([]byte, 0, 4096), s))
	return err
}

type jsonRealServer struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	Weight  int    `json:"weight"`
}

type jsonVirtualServer struct {
	Protocol           string           `json:"protocol"`
	Address            string           `json:"address"`
	Port               uint16           `json:"port"`
	Scheduler          string           `json:"scheduler"`
	Flags              []string         `json:"flags"`
	PersistenceTimeout uint32           `json:"persistenceTimeout"`
	Service            string           `json:"service"`
	RealServers        []jsonRealServer `json:"realServers"`
}

type jsonRefusal struct {
	Service string `json:"service"`
	Field   string `json:"field"`
	Address string `json:"address"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type jsonState struct {
	VirtualServers []jsonVirtualServer `json:"virtualServers"`
	Addresses      []string            `json:"addresses"`
	IPSets         map[string][]string `json:"ipsets"`
	IPTables       string              `json:"iptables"`
	Refusals       []jsonRefusal       `json:"refusals"`
}

// FlagNames names a virtual server's flags: "persistent" for -p, then the
// scheduler flags as ipvsadm -b names them ("mh-port", "sh-fallback", ...).
func FlagNames(vs *ipvs.VirtualServer) []string {
	names := []string{}
	if vs.Flags&ipvs.FlagPersistent != 0 {
		names = append(names, "persistent")
	}
	for i, n := range ipvs.SchedulerFlagNames(vs.Scheduler) {
		if vs.Flags&(ipvs.FlagSchedSH1<<i) != 0 {
			names = append(names, n)
		}
	}
	return names
}

// WriteJSON writes s as one JSON document (two-space indent, trailing
// newline): {"virtualServers":[{"protocol","address","port","scheduler",
// "flags","persistenceTimeout","service","realServers":[{"address","port",
// "weight"}]}],"addresses":[...],"ipsets":{name:[entries]},"iptables":"...",
// "refusals":[{"service","field","address","reason","message"}]}. Lists are
// never null; ipset entries are in `ipset save` form; "iptables" is the text
// of the `# iptables` section.
func WriteJSON(w io.Writer, s State) error {
	js := jsonState{
		VirtualServers: make([]jsonVirtualServer, len(s.VirtualServers)),
		Addresses:      make([]string, len(s.Addresses)),
		IPSets:         make(map[string][]string, len(s.IPSets)),
		IPTables:       string(appendRulesets(nil, s.Rulesets)),
		Refusals:       make([]jsonRefusal, len(s.Refusals)),
	}
	for i := range s.VirtualServers {
		vs := &s.VirtualServers[i]
		jv := jsonVirtualServer{
			Protocol: string(vs.Protocol), Address: vs.Address.String(), Port: vs.Port,
			Scheduler: vs.Scheduler, Flags: FlagNames(vs), PersistenceTimeout: vs.PersistenceTimeout,
			Service: vs.Service.String(), RealServers: make([]jsonRealServer, len(vs.RealServers)),
		}
		for j, rs := range vs.RealServers {
			jv.RealServers[j] = jsonRealServer{Address: rs.Address.String(), Port: rs.Port, Weight: int(rs.Weight)}
		}
		js.VirtualServers[i] = jv
	}
	for i, a := range s.Addresses {
		js.Addresses[i] = a.String()
	}
	for _, set := range s.IPSets {
		es := make([]string, len(set.Entries))
		for j, e := range set.Entries {
			es[j] = string(iptables.AppendEntry(nil, set.Type, e))
		}
		js.IPSets[set.Name] = es
	}
	for i, r := range s.Refusals {
		js.Refusals[i] = jsonRefusal{Service: r.Subject.String(), Field: r.Field, Address: r.Address, Reason: string(r.Reason), Message: r.Message}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(js)
}
