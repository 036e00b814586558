package kstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// ErrNoDevice: Addresses was asked for an interface that does not exist.
var ErrNoDevice = errors.New("kstate: no such device")

// IPVS reads the namespace's IPVS table with `ipvsadm -S -n`, sorted as
// the plan sorts it (ipvs.Sort). Service names are empty: the kernel has none.
func IPVS(ns *ktest.NS) ([]ipvs.VirtualServer, error) {
	out, err := ns.Exec("ipvsadm", "-S", "-n")
	if err != nil {
		return nil, err
	}
	vss, err := parseIPVSSave(out)
	if err != nil {
		return nil, err
	}
	ipvs.Sort(vss)
	return vss, nil
}

// parseIPVSSave parses `ipvsadm -S -n` output: "-A -t VIP:PORT -s SCHED
// [-p TIMEOUT [-M MASK]] [-b FLAGS]" and "-a -t VIP:PORT -r RIP:PORT -m -w W".
func parseIPVSSave(out string) ([]ipvs.VirtualServer, error) {
	var vss []ipvs.VirtualServer
	index := map[ipvs.Key]int{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		bad := func(why string) error { return unparsable("ipvsadm -S -n", line, why) }
		if len(f) < 3 || (f[0] != "-A" && f[0] != "-a") {
			return nil, bad("want -A or -a SERVICE ...")
		}
		key, err := ipvs.ParseKey(f[1] + " " + f[2])
		if err != nil {
			return nil, bad(err.Error())
		}
		if f[0] == "-A" {
			vs, why := parseVirtualServer(key, f[3:])
			if _, dup := index[key]; dup && why == "" {
				why = "virtual server listed twice"
			}
			if why != "" {
				return nil, bad(why)
			}
			index[key] = len(vss)
			vss = append(vss, vs)
			continue
		}
		i, ok := index[key]
		if !ok {
			return nil, bad("real server before its virtual server")
		}
		rs, why := parseRealServer(f[3:])
		if why != "" {
			return nil, bad(why)
		}
		vss[i].RealServers = append(vss[i].RealServers, rs)
	}
	return vss, nil
}

// parseVirtualServer reads the options of one `-A` line; why is set when
// they have no plan form.
func parseVirtualServer(key ipvs.Key, opts []string) (vs ipvs.VirtualServer, why string) {
	vs = ipvs.VirtualServer{Key: key}
	for i := 0; i < len(opts); i += 2 {
		if i+1 >= len(opts) {
			return vs, "option " + opts[i] + " without a value"
		}
		v := opts[i+1]
		switch opts[i] {
		case "-s":
			vs.Scheduler = v
		case "-p":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return vs, "persistence timeout " + v
			}
			vs.Flags |= ipvs.FlagPersistent
			vs.PersistenceTimeout = uint32(n)
		case "-M":
			if v != "255.255.255.255" && v != "128" {
				return vs, "netmask " + v + ": plan form has only full-length persistence masks"
			}
		case "-b":
			fl, err := parseSchedFlags(vs.Scheduler, v)
			if err != nil {
				return vs, err.Error()
			}
			vs.Flags |= fl
		default:
			return vs, "option " + opts[i] + " has no plan form"
		}
	}
	if vs.Scheduler == "" {
		return vs, "no -s scheduler"
	}
	return vs, ""
}

// parseRealServer reads the options of one `-a` line; why is set when
// they have no plan form (the proxy only masquerades, without thresholds).
func parseRealServer(opts []string) (rs ipvs.RealServer, why string) {
	rs = ipvs.RealServer{Weight: -1}
	masq := false
	for j := 0; j < len(opts); j++ {
		switch opts[j] {
		case "-m":
			masq = true
		case "-r", "-w":
			if j+1 >= len(opts) {
				return rs, "option " + opts[j] + " without a value"
			}
			if opts[j] == "-r" {
				ap, err := netip.ParseAddrPort(opts[j+1])
				if err != nil {
					return rs, err.Error()
				}
				rs.Address, rs.Port = ap.Addr(), ap.Port()
			} else {
				w, err := strconv.ParseInt(opts[j+1], 10, 32)
				if err != nil {
					return rs, "weight " + opts[j+1]
				}
				rs.Weight = int32(w)
			}
			j++
		default:
			return rs, "option " + opts[j] + " has no plan form (the proxy only masquerades, without thresholds)"
		}
	}
	if !masq || !rs.Address.IsValid() || rs.Weight < 0 {
		return rs, "want -r ADDR:PORT -m -w WEIGHT"
	}
	return rs, ""
}

// parseSchedFlags is the inverse of ipvsadm's -b list.
func parseSchedFlags(sched, list string) (ipvs.Flags, error) {
	var fl ipvs.Flags
	for _, n := range strings.Split(list, ",") {
		switch {
		case n == "flag-1" || n == sched+"-fallback" && (sched == "sh" || sched == "mh"):
			fl |= ipvs.FlagSchedSH1
		case n == "flag-2" || n == sched+"-port" && (sched == "sh" || sched == "mh"):
			fl |= ipvs.FlagSchedSH2
		case n == "flag-3":
			fl |= 0x20
		default:
			return 0, fmt.Errorf("scheduler flag %q", n)
		}
	}
	return fl, nil
}

// Addresses reads dev's addresses with `ip -j addr show dev DEV`, sorted by
// address then length. Link-local addresses are included: the plan never
// has one, so one there is a difference a test should see. A missing
// device is an error wrapping ErrNoDevice.
func Addresses(ns *ktest.NS, dev string) ([]netip.Prefix, error) {
	if _, err := ns.Exec("ip", "link", "show", "dev", dev); err != nil {
		return nil, fmt.Errorf("%w: %s in %s: %v", ErrNoDevice, dev, ns.Name, err)
	}
	out, err := ns.Exec("ip", "-j", "addr", "show", "dev", dev)
	if err != nil {
		return nil, err
	}
	return parseIPAddrJSON(out)
}

func parseIPAddrJSON(out string) ([]netip.Prefix, error) {
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		return nil, unparsable("ip -j addr", out, err.Error())
	}
	var ps []netip.Prefix
	for _, l := range links {
		for _, a := range l.AddrInfo {
			addr, err := netip.ParseAddr(a.Local)
			if err != nil {
				return nil, unparsable("ip -j addr", a.Local, err.Error())
			}
			p, err := addr.Prefix(a.PrefixLen)
			if err != nil || p.Addr() != addr {
				// Not a host prefix: keep the address as the kernel holds it.
				p = netip.PrefixFrom(addr, a.PrefixLen)
			}
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return ps, nil
}

// IPSets reads every ipset with `ipset save`: sets by name, entries sorted
// (iptables.SortEntries). The family of a bitmap:port set is unknown to
// ipset save and left empty (the plan form does not print it).
func IPSets(ns *ktest.NS) ([]iptables.IPSet, error) {
	out, err := ns.IPSetSave()
	if err != nil {
		return nil, err
	}
	return parseIPSetSave(out)
}

func parseIPSetSave(out string) ([]iptables.IPSet, error) {
	sets := map[string]*iptables.IPSet{}
	maxElems := map[string]uint64{}
	creates := map[string]string{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		bad := func(why string) error { return unparsable("ipset save", line, why) }
		switch {
		case len(f) >= 3 && f[0] == "create":
			s := &iptables.IPSet{Name: f[1], Type: f[2]}
			maxElem, err := parseCreateOptions(s, f[3:])
			if err != nil {
				return nil, bad(err.Error())
			}
			sets[s.Name], maxElems[s.Name], creates[s.Name] = s, maxElem, line
		case len(f) == 3 && f[0] == "add":
			s := sets[f[1]]
			if s == nil {
				return nil, bad("member of an undeclared set")
			}
			e, err := parseEntry(s.Type, f[2])
			if err != nil {
				return nil, bad(err.Error())
			}
			s.Entries = append(s.Entries, e)
		default:
			return nil, bad("want `create NAME TYPE OPTIONS` or `add NAME MEMBER` (member options have no plan form)")
		}
	}
	out2 := make([]iptables.IPSet, 0, len(sets))
	for _, n := range sortedKeys(sets) {
		s := sets[n]
		s.Entries = iptables.SortEntries(s.Entries)
		// The plan form prints the maxelem the proxy creates the set with
		// for its entries; the proxy keeps a larger one only above
		// kube-proxy's 65536.
		if m := maxElems[n]; s.Type != iptables.TypeBitmapPort && (m > math.MaxUint32 || !iptables.MaxElemHolds(uint32(m), len(s.Entries)) || m == 0) {
			return nil, unparsable("ipset save", creates[n], fmt.Sprintf("maxelem %d for %d entries, the plan form prints %d", m, len(s.Entries), iptables.MaxElemFor(len(s.Entries))))
		}
		out2 = append(out2, *s)
	}
	return out2, nil
}

// parseCreateOptions checks a create line's options against what the plan
// form prints: family must match, hashsize may have grown, the kernel's
// bucketsize and initval are dropped, maxelem is returned (checked against
// the entries by the caller); anything else is an error.
func parseCreateOptions(s *iptables.IPSet, opts []string) (maxElem uint64, err error) {
	for i := 0; i < len(opts); i += 2 {
		if i+1 >= len(opts) {
			return 0, fmt.Errorf("option %s has no value or no plan form", opts[i])
		}
		v := opts[i+1]
		switch opts[i] {
		case "family":
			s.Family = v
		case "hashsize", "bucketsize", "initval":
		case "maxelem":
			if maxElem, err = strconv.ParseUint(v, 10, 64); err != nil {
				return 0, fmt.Errorf("maxelem %q", v)
			}
		case "range":
			if want := fmt.Sprintf("%d-%d", iptables.BitmapPortFrom, iptables.BitmapPortTo); v != want {
				return 0, fmt.Errorf("range %s, the plan form prints %s", v, want)
			}
		default:
			return 0, fmt.Errorf("option %s has no plan form", opts[i])
		}
	}
	return maxElem, nil
}

// parseEntry is the inverse of iptables.AppendEntry.
func parseEntry(typ, s string) (iptables.Entry, error) {
	var e iptables.Entry
	if typ == iptables.TypeBitmapPort {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return e, fmt.Errorf("port %q", s)
		}
		e.Port = uint16(p)
		return e, nil
	}
	parts := strings.Split(s, ",")
	want := map[string]int{iptables.TypeHashIP: 1, iptables.TypeHashIPPort: 2, iptables.TypeHashIPPortIP: 3, iptables.TypeHashIPPortNet: 3}[typ]
	if want == 0 {
		return e, fmt.Errorf("set type %s has no plan form", typ)
	}
	if len(parts) != want {
		return e, fmt.Errorf("%s member %q: want %d parts", typ, s, want)
	}
	var err error
	if e.IP, err = netip.ParseAddr(parts[0]); err != nil {
		return e, err
	}
	if want == 1 {
		return e, nil
	}
	proto, port, ok := strings.Cut(parts[1], ":")
	if !ok {
		return e, fmt.Errorf("proto:port %q", parts[1])
	}
	switch model.Protocol(proto) {
	case model.TCP, model.UDP, model.SCTP:
		e.Protocol = model.Protocol(proto)
	default:
		return e, fmt.Errorf("protocol %q has no plan form", proto)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return e, fmt.Errorf("port %q", port)
	}
	e.Port = uint16(p)
	if want == 2 {
		return e, nil
	}
	if strings.Contains(parts[2], "/") {
		e.Net, err = netip.ParsePrefix(parts[2])
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(parts[2])
		e.Net = netip.PrefixFrom(a, a.BitLen())
	}
	return e, err
}

// builtinOrder is the plan's order of built-in chains (iptables.Rules).
var builtinOrder = []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// Rules reads iptables-save (family "inet") or ip6tables-save ("inet6")
// into the plan's shape: tables nat, filter, then any other by name, each
// only when it has a chain of its own or a rule; built-in chains (in
// PREROUTING, INPUT, FORWARD, OUTPUT, POSTROUTING order) only when they
// hold rules, then the other chains by name. Counters, policies and
// comment lines are dropped: the plan form has none.
func Rules(ns *ktest.NS, family string) (iptables.Ruleset, error) {
	bin := "iptables-save"
	if family == iptables.FamilyIPv6 {
		bin = "ip6tables-save"
	}
	out, err := ns.Exec(bin)
	if err != nil {
		return iptables.Ruleset{}, err
	}
	return parseIPTablesSave(family, out)
}

func parseIPTablesSave(family, out string) (iptables.Ruleset, error) {
	type table struct {
		chains  map[string]*iptables.Chain
		nonEmpt bool
	}
	tables := map[string]*table{}
	var cur *table
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		bad := func(why string) error { return unparsable("iptables-save", line, why) }
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			cur = &table{chains: map[string]*iptables.Chain{}}
			tables[line[1:]] = cur
		case cur == nil:
			return iptables.Ruleset{}, bad("outside a table")
		case line == "COMMIT":
			cur = nil
		case strings.HasPrefix(line, ":"):
			f := strings.Fields(line[1:])
			if len(f) < 2 {
				return iptables.Ruleset{}, bad("chain line")
			}
			c := &iptables.Chain{Name: f[0], Builtin: f[1] != "-"}
			cur.chains[c.Name] = c
			if !c.Builtin {
				cur.nonEmpt = true
			}
		case strings.HasPrefix(line, "-A "):
			args, err := fields(line[3:])
			if err != nil || len(args) < 1 {
				return iptables.Ruleset{}, bad("rule")
			}
			c := cur.chains[args[0]]
			if c == nil {
				return iptables.Ruleset{}, bad("rule in an undeclared chain")
			}
			c.Rules = append(c.Rules, iptables.Rule(args[1:]))
			cur.nonEmpt = true
		default:
			return iptables.Ruleset{}, bad("no plan form")
		}
	}
	rs := iptables.Ruleset{Family: family}
	names := []string{"nat", "filter"}
	for _, n := range sortedKeys(tables) {
		if n != "nat" && n != "filter" {
			names = append(names, n)
		}
	}
	for _, n := range names {
		tb := tables[n]
		if tb == nil || !tb.nonEmpt {
			continue
		}
		t := iptables.Table{Name: n}
		for _, b := range builtinOrder {
			if c := tb.chains[b]; c != nil && len(c.Rules) > 0 {
				t.Chains = append(t.Chains, *c)
			}
		}
		for _, cn := range sortedKeys(tb.chains) {
			c := tb.chains[cn]
			if c.Builtin && !slices.Contains(builtinOrder, cn) && len(c.Rules) > 0 {
				t.Chains = append(t.Chains, *c)
			}
		}
		for _, cn := range sortedKeys(tb.chains) {
			if c := tb.chains[cn]; !c.Builtin {
				t.Chains = append(t.Chains, *c)
			}
		}
		rs.Tables = append(rs.Tables, t)
	}
	return rs, nil
}
