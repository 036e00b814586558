// Package kstate reads what a network namespace's kernel holds — the IPVS
// table, an interface's addresses, the ipsets and the iptables rules — with
// the system tools (ipvsadm -S -n, ip -j addr, ipset save, iptables-save),
// never with the proxy's own netlink code, and renders it with the proxy's own
// renderers (ipvs.Save, iptables.AppendSave, iptables.AppendRestore,
// planner.WriteText), so a kernel test compares `ipvs-proxy plan` and the
// kernel with one string comparison:
//
//	if got, want := kstate.Text(t, node.NS), planText; got != want {
//		t.Errorf("kernel differs from plan:\n%s", kstate.Diff(want, got))
//	}
//
// Readers fail loudly on anything the plan form cannot express (a real
// server that is not masquerading, an ipset with timeouts, an unknown
// ipvsadm option): a reader that dropped it would hide a difference.
//
// It is apart from test/ktest because it imports ipvs, iptables and
// planner: ktest must stay importable by those packages' in-package tests.
// Those packages use kstate from an external test package (package ipvs_test).
// It only reads; it never changes kernel state.
package kstate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// ErrUnparsable is wrapped by every reader error about tool output the plan
// form cannot express or the reader does not understand.
var ErrUnparsable = errors.New("kstate: kernel state not expressible in plan form")

// Device is the dummy interface whose addresses State reads.
const Device = "kube-ipvs0"

// State reads the namespace's whole proxy-relevant kernel state in the
// planner's form: IPVS (sorted as the plan sorts), the addresses of
// kube-ipvs0 (none when it does not exist), every ipset, and the iptables
// (and, when it holds any chain or rule, ip6tables) rules. Refusals are
// always empty: the kernel has none.
func State(t testing.TB, ns *ktest.NS) planner.State {
	t.Helper()
	var st planner.State
	var err error
	if st.VirtualServers, err = IPVS(ns); err != nil {
		t.Fatal(err)
	}
	if st.Addresses, err = Addresses(ns, Device); err != nil && !errors.Is(err, ErrNoDevice) {
		t.Fatal(err)
	}
	if st.IPSets, err = IPSets(ns); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []string{iptables.FamilyIPv4, iptables.FamilyIPv6} {
		rs, err := Rules(ns, fam)
		if err != nil {
			t.Fatal(err)
		}
		if fam == iptables.FamilyIPv4 || len(rs.Tables) > 0 {
			st.Rulesets = append(st.Rulesets, rs)
		}
	}
	return st
}

// Text is State in `ipvs-proxy plan`'s text layout (planner.WriteText).
func Text(t testing.TB, ns *ktest.NS) string {
	t.Helper()
	var b strings.Builder
	if err := planner.WriteText(&b, State(t, ns)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// IPVSText is the `# ipvs` section: `ipvsadm -S -n` sorted as the plan sorts.
func IPVSText(t testing.TB, ns *ktest.NS) string {
	t.Helper()
	vss, err := IPVS(ns)
	if err != nil {
		t.Fatal(err)
	}
	return ipvs.Save(vss)
}

// AddressesText is the `# kube-ipvs0` section for dev: one ADDR/LEN per
// line, sorted.
func AddressesText(t testing.TB, ns *ktest.NS, dev string) string {
	t.Helper()
	ps, err := Addresses(ns, dev)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// IPSetText is the `# ipset` section: `ipset save` with sets by name,
// entries sorted, the kernel's bucketsize/initval dropped.
func IPSetText(t testing.TB, ns *ktest.NS) string {
	t.Helper()
	sets, err := IPSets(ns)
	if err != nil {
		t.Fatal(err)
	}
	return string(iptables.AppendSave(nil, sets))
}

// RulesText is iptables-save (family "inet") or ip6tables-save ("inet6")
// in plan form: counters and comments stripped, built-in chains undeclared,
// tables nat and filter first (see Rules).
func RulesText(t testing.TB, ns *ktest.NS, family string) string {
	t.Helper()
	rs, err := Rules(ns, family)
	if err != nil {
		t.Fatal(err)
	}
	return string(iptables.AppendRestore(nil, &rs))
}

// Diff is a short report of how two texts differ, line by line: lines only
// in want ("-") and only in got ("+"), each with its line number, then both
// texts in full. Empty when they are equal.
func Diff(want, got string) string {
	if want == got {
		return ""
	}
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	count := func(ls []string) map[string]int {
		m := map[string]int{}
		for _, l := range ls {
			m[l]++
		}
		return m
	}
	wc, gc := count(wl), count(gl)
	var b strings.Builder
	for i, l := range wl {
		if gc[l] > 0 {
			gc[l]--
			continue
		}
		fmt.Fprintf(&b, "- %d: %s\n", i+1, l)
	}
	for i, l := range gl {
		if wc[l] > 0 {
			wc[l]--
			continue
		}
		fmt.Fprintf(&b, "+ %d: %s\n", i+1, l)
	}
	if b.Len() == 0 {
		b.WriteString("same lines, different order\n")
	}
	fmt.Fprintf(&b, "--- want\n%s--- got\n%s", want, got)
	return b.String()
}

func unparsable(tool, line, why string) error {
	return fmt.Errorf("%w: %s: %q: %s", ErrUnparsable, tool, line, why)
}

// fields splits an iptables-save rule into arguments: whitespace-separated,
// double-quoted strings unquoted with their backslash escapes removed.
func fields(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		switch {
		case s[i] == ' ' || s[i] == '\t':
			i++
		case s[i] == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, errors.New("unterminated quote")
			}
			out = append(out, b.String())
			i = j + 1
		default:
			j := i
			for j < len(s) && s[j] != ' ' && s[j] != '\t' {
				j++
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
