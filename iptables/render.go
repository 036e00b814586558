package iptables

import (
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// AppendEntry appends e as `ipset save` prints a member of a set of type
// typ: "10.96.0.10" (hash:ip), "10.96.0.10,tcp:80" (hash:ip,port),
// "10.244.1.5,tcp:8080,10.244.1.5" (hash:ip,port,ip),
// "203.0.113.7,tcp:80,10.0.0.0/8" (hash:ip,port,net; a host-length net
// prints without its length), "30080" (bitmap:port). IPv6 addresses are not
// bracketed.
func AppendEntry(b []byte, typ string, e Entry) []byte {
	switch typ {
	case TypeBitmapPort:
		return strconv.AppendUint(b, uint64(e.Port), 10)
	case TypeHashIP:
		return e.IP.WithZone("").AppendTo(b)
	}
	b = e.IP.WithZone("").AppendTo(b)
	b = append(b, ',')
	b = append(b, e.Protocol...)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(e.Port), 10)
	switch typ {
	case TypeHashIPPortIP:
		b = append(b, ',')
		b = e.Net.Addr().WithZone("").AppendTo(b)
	case TypeHashIPPortNet:
		b = append(b, ',')
		b = e.Net.Addr().WithZone("").AppendTo(b)
		if e.Net.IsValid() && e.Net.Bits() != e.Net.Addr().BitLen() {
			b = append(b, '/')
			b = strconv.AppendInt(b, int64(e.Net.Bits()), 10)
		}
	}
	return b
}

// CompareEntries orders set members by IP, protocol, port, then net.
func CompareEntries(a, b Entry) int {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	if c := a.Net.Addr().Compare(b.Net.Addr()); c != 0 {
		return c
	}
	return a.Net.Bits() - b.Net.Bits()
}

// SortEntries sorts entries by CompareEntries and drops duplicates.
func SortEntries(es []Entry) []Entry {
	slices.SortFunc(es, CompareEntries)
	return slices.CompactFunc(es, func(a, b Entry) bool { return CompareEntries(a, b) == 0 })
}

func sortSets(s []IPSet) {
	slices.SortFunc(s, func(a, b IPSet) int { return strings.Compare(a.Name, b.Name) })
}

// AppendCreate appends the `create` line of s as `ipset save` prints it,
// without the trailing newline: "create KUBE-CLUSTER-IP hash:ip,port family
// inet hashsize 1024 maxelem 65536" (maxelem is MaxElemFor the number of
// entries) or "create KUBE-NODE-PORT-TCP bitmap:port range 0-65535". The kernel's own save (ipset >= 7.11 on
// kernels >= 5.11) appends "bucketsize N initval 0x..." to hash sets; the
// initval is random, so readers strip both before comparing.
func AppendCreate(b []byte, s *IPSet) []byte {
	b = append(b, "create "...)
	b = append(b, s.Name...)
	b = append(b, ' ')
	b = append(b, s.Type...)
	if s.Type == TypeBitmapPort {
		b = append(b, " range "...)
		b = strconv.AppendInt(b, BitmapPortFrom, 10)
		b = append(b, '-')
		return strconv.AppendInt(b, BitmapPortTo, 10)
	}
	b = append(b, " family "...)
	b = append(b, s.Family...)
	b = append(b, " hashsize "...)
	b = strconv.AppendInt(b, HashSize, 10)
	b = append(b, " maxelem "...)
	return strconv.AppendUint(b, uint64(MaxElemFor(len(s.Entries))), 10)
}

// AppendSave appends sets in `ipset save` form: for each set its create line,
// then one "add NAME ENTRY" line per entry, in the order given.
func AppendSave(b []byte, sets []IPSet) []byte {
	for i := range sets {
		s := &sets[i]
		b = AppendCreate(b, s)
		b = append(b, '\n')
		for _, e := range s.Entries {
			b = append(b, "add "...)
			b = append(b, s.Name...)
			b = append(b, ' ')
			b = AppendEntry(b, s.Type, e)
			b = append(b, '\n')
		}
	}
	return b
}

// WriteIPSetSave writes sets in `ipset save` form.
func WriteIPSetSave(w io.Writer, sets []IPSet) error {
	_, err := w.Write(AppendSave(nil, sets))
	return err
}

// saveQuote quotes a value as iptables-save does (xtables_save_string): bare
// when it is only letters, digits, dash and underscore, else in double
// quotes with the double quote, backslash and single quote escaped.
func saveQuote(b []byte, v string) []byte {
	bare := v != ""
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			bare = false
			break
		}
	}
	if bare {
		return append(b, v...)
	}
	b = append(b, '"')
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '"' || c == '\\' || c == '\'' {
			b = append(b, '\\')
		}
		b = append(b, v[i])
	}
	return append(b, '"')
}

// AppendRule appends "-A CHAIN ARGS" as iptables-save prints the rule; the
// argument after --comment is quoted as iptables-save quotes it.
func AppendRule(b []byte, chain string, r Rule) []byte {
	b = append(b, "-A "...)
	b = append(b, chain...)
	for i, a := range r {
		b = append(b, ' ')
		if i > 0 && r[i-1] == "--comment" {
			b = saveQuote(b, a)
			continue
		}
		b = append(b, a...)
	}
	return b
}

// AppendRestore appends rs in iptables-save form, one "*table" ... "COMMIT"
// block per table: a ":CHAIN - [0:0]" line for each of the proxy's own
// chains, then every rule. Built-in chains are not declared, so the text is
// valid `iptables-restore --noflush` input that touches only the proxy's
// chains and appends its jump rules.
func AppendRestore(b []byte, rs *Ruleset) []byte {
	for _, t := range rs.Tables {
		b = append(b, '*')
		b = append(b, t.Name...)
		b = append(b, '\n')
		for _, c := range t.Chains {
			if c.Builtin {
				continue
			}
			b = append(b, ':')
			b = append(b, c.Name...)
			b = append(b, " - [0:0]\n"...)
		}
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				b = AppendRule(b, c.Name, r)
				b = append(b, '\n')
			}
		}
		b = append(b, "COMMIT\n"...)
	}
	return b
}

// WriteRestore writes rs in iptables-save form (see AppendRestore).
func WriteRestore(w io.Writer, rs *Ruleset) error {
	_, err := w.Write(AppendRestore(nil, rs))
	return err
}

// HostPrefix is addr as a /32 or /128.
func HostPrefix(a netip.Addr) netip.Prefix {
	a = a.WithZone("")
	return netip.PrefixFrom(a, a.BitLen())
}
