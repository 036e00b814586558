package iptables

import (
	"slices"
	"strings"
)

// Reading a family's tables from one `iptables-save` (all tables, one
// process) and comparing saved rules with planned ones in Go, where the
// chain syncer once asked the kernel rule by rule (`iptables -C`).

// parseSaveAll reads `iptables-save` output of every table: each table's
// chains and rules by name ("*nat" ... "COMMIT"). A table the output does
// not list (not yet created in this namespace) is absent: no chains.
func parseSaveAll(out string) map[string]savedTable {
	tables := map[string]savedTable{}
	var cur savedTable
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "*"):
			cur = savedTable{}
			tables[line[1:]] = cur
		case line == "COMMIT":
			cur = nil
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if _, ok := cur[name]; !ok {
				cur[name] = nil
			}
		case strings.HasPrefix(line, "-A "):
			name, rest, _ := strings.Cut(line[3:], " ")
			cur[name] = append(cur[name], rest)
		}
	}
	return tables
}

// saveWords splits a rule's text as iptables-restore reads it: words
// separated by blanks, a double-quoted word taken whole, a backslash
// escaping the character after it inside quotes.
func saveWords(text string) []string {
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case quoted && c == '\\' && i+1 < len(text):
			i++
			w.WriteByte(text[i])
		case c == '"':
			quoted = !quoted
			in = true
		case !quoted && (c == ' ' || c == '\t'):
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// sameWords reports whether saved rules are the planned ones, in order,
// whatever the quoting: what iptables -C answered, one process per rule,
// for the spellings that differ only there (an older iptables-save quotes
// a one-word comment, a newer one does not).
func sameWords(saved []string, planned []Rule) bool {
	return slices.EqualFunc(saved, planned, func(s string, r Rule) bool {
		return slices.Equal(saveWords(s), r)
	})
}

// DifferingChains are the chains of rs, named "TABLE CHAIN", that one
// `iptables-save` of rs's family (save) does not hold as planned: the
// proxy's own chains, each compared whole and in order. A chain of names
// that rs does not have is left out.
func DifferingChains(save string, rs *Ruleset, names []string) []string {
	saved := parseSaveAll(save)
	var out []string
	for _, t := range rs.Tables {
		for _, c := range t.Chains {
			name := t.Name + " " + c.Name
			if c.Builtin || !slices.Contains(names, name) {
				continue
			}
			got, ok := saved[t.Name][c.Name]
			if !ok || !sameWords(got, c.Rules) {
				out = append(out, name)
			}
		}
	}
	return out
}
