package planner

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// ErrTextLayout is wrapped by ParseText for text that is not in the `plan`
// text layout.
var ErrTextLayout = errors.New("not in the plan text layout")

// Text is `plan`'s text output split into its sections, one line per
// element, without the header lines. IP6Tables is nil when the text has no
// "# ip6tables" section.
type Text struct {
	IPVS, Addresses, IPSet, IPTables, IP6Tables, Refused []string
}

// ParseText splits text in the layout WriteText writes and checks its
// structure: the section headers exactly once each and in order ("#
// ip6tables" optional), every line of its section's shape (`-A`/`-a` lines
// under "# ipvs", prefixes under "# kube-ipvs0", `create`/`add` under "#
// ipset", `*table`, `:chain`, `-A` and `COMMIT` under the iptables
// sections), the text ending with a newline. Refused lines are returned as
// they are; nothing can be told of them from the text alone but that each
// is one line.
func ParseText(b []byte) (Text, error) {
	var t Text
	s := string(b)
	if !strings.HasSuffix(s, "\n") {
		return t, fmt.Errorf("%w: no final newline", ErrTextLayout)
	}
	order := []string{SectionIPVS, SectionAddresses, SectionIPSet, SectionIPTables, SectionIP6Tables, SectionRefused}
	next := 0
	var cur *[]string
	section := ""
	for i, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if strings.HasPrefix(l, "#") {
			for next < len(order) && order[next] != l && order[next] == SectionIP6Tables {
				next++
			}
			if next >= len(order) || order[next] != l {
				return t, fmt.Errorf("%w: line %d: header %q out of place", ErrTextLayout, i+1, l)
			}
			next++
			section = l
			switch l {
			case SectionIPVS:
				cur = &t.IPVS
			case SectionAddresses:
				cur = &t.Addresses
			case SectionIPSet:
				cur = &t.IPSet
			case SectionIPTables:
				cur = &t.IPTables
			case SectionIP6Tables:
				cur = &t.IP6Tables
				t.IP6Tables = []string{}
			case SectionRefused:
				cur = &t.Refused
			}
			continue
		}
		if cur == nil || !lineFits(section, l) {
			return t, fmt.Errorf("%w: line %d: %q does not belong in section %q", ErrTextLayout, i+1, l, section)
		}
		*cur = append(*cur, l)
	}
	if next != len(order) {
		return t, fmt.Errorf("%w: section %q missing", ErrTextLayout, order[next])
	}
	return t, nil
}

// lineFits reports whether l has the shape of a line of section.
func lineFits(section, l string) bool {
	switch section {
	case SectionIPVS:
		return strings.HasPrefix(l, "-A ") || strings.HasPrefix(l, "-a ")
	case SectionAddresses:
		_, err := netip.ParsePrefix(l)
		return err == nil
	case SectionIPSet:
		return strings.HasPrefix(l, "create ") || strings.HasPrefix(l, "add ")
	case SectionIPTables, SectionIP6Tables:
		return l == "COMMIT" || strings.HasPrefix(l, "*") || strings.HasPrefix(l, ":") || strings.HasPrefix(l, "-A ")
	case SectionRefused:
		return true
	}
	return false
}

// CheckText checks that text is exactly st in the `plan` text layout as
// far as its structure goes: ParseText accepts it, "# ip6tables" is there
// exactly when st plans IPv6, and the "# refused" section has one line per
// refusal of st, each reading back (model.ParseRefusal) to that refusal's
// subject (as text), field, address and reason, and to its message as model.Line
// renders it. It is what a reader of `plan`'s output relies on: no value
// from the API can add a section, a refusal or a line.
func CheckText(text []byte, st State) error {
	t, err := ParseText(text)
	if err != nil {
		return err
	}
	ip6 := slices.ContainsFunc(st.Rulesets, func(rs iptables.Ruleset) bool { return rs.Family == iptables.FamilyIPv6 })
	if (t.IP6Tables != nil) != ip6 {
		return fmt.Errorf("%w: %q section present %v, IPv6 planned %v", ErrTextLayout, SectionIP6Tables, t.IP6Tables != nil, ip6)
	}
	if len(t.Refused) != len(st.Refusals) {
		return fmt.Errorf("%w: %d refusal lines for %d refusals", ErrTextLayout, len(t.Refused), len(st.Refusals))
	}
	for i, r := range st.Refusals {
		got, err := model.ParseRefusal(t.Refused[i])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrTextLayout, err)
		}
		r.Message = model.Line(r.Message)
		// The subject reads back as the same text: a namespace from the
		// API may hold a '/' that the text cannot tell from the separator.
		if got.Subject.String() == r.Subject.String() {
			got.Subject = r.Subject
		}
		if got != r {
			return fmt.Errorf("%w: refusal line %q reads back as %+v, want %+v", ErrTextLayout, t.Refused[i], got, r)
		}
	}
	return nil
}
