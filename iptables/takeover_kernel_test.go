//go:build kernel

package iptables_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
)

// Taking a node over from kube-proxy 1.34's IPVS mode, and handing it
// back, in a real kernel: the state is restored from the fixture
// (testdata/kube-proxy-1.34) as kube-proxy's `ipset save`, `iptables-save`
// and `ip6tables-save` would print it.

// runIn is run with stdin.
func runIn(t testing.TB, in string, args ...string) {
	t.Helper()
	var errb bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stderr = strings.NewReader(in), &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
}

// loadKubeProxyKernel restores the fixture into the current namespace.
func loadKubeProxyKernel(t testing.TB) {
	t.Helper()
	runIn(t, fixture(t, "ipset.save"), "ipset", "restore")
	runIn(t, fixture(t, "iptables.save"), "iptables-restore")
	runIn(t, fixture(t, "ip6tables.save"), "ip6tables-restore")
}

// initvals are the hash sets' initval in `ipset save`: random at creation,
// so a set that keeps its initval is the set that was there.
func initvals(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for line := range strings.Lines(run(t, "ipset", "save")) {
		f := strings.Fields(line)
		if i := slices.Index(f, "initval"); len(f) > 1 && f[0] == "create" && i > 0 && i+1 < len(f) {
			out[f[1]] = f[i+1]
		}
	}
	return out
}

// kubeProxyHas reports whether kube-proxy's IPVS mode has the IPv4 set
// name too (SetSpec.KubeProxy).
func kubeProxyHas(name string) bool {
	for _, s := range iptables.SetSpecs {
		if s.Name == name {
			return s.KubeProxy()
		}
	}
	return false
}

// setHeader is `ipset list -t NAME`: maxelem, references and entries.
type setHeader struct{ maxElem, refs, entries int }

func listHeader(t testing.TB, name string) setHeader {
	t.Helper()
	var h setHeader
	for line := range strings.Lines(run(t, "ipset", "list", "-t", name)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		switch k {
		case "Header":
			f := strings.Fields(v)
			if i := slices.Index(f, "maxelem"); i >= 0 && i+1 < len(f) {
				h.maxElem, _ = strconv.Atoi(f[i+1])
			}
		case "References":
			h.refs, _ = strconv.Atoi(v)
		case "Number of entries":
			h.entries, _ = strconv.Atoi(v)
		}
	}
	return h
}

// kubeProxyCreates are kube-proxy 1.34's ensureIPSet commands for every set
// of both families (ipset.go createSet), as `ipset restore` lines.
func kubeProxyCreates() string {
	var b strings.Builder
	for _, fam := range []string{iptables.FamilyIPv4, iptables.FamilyIPv6} {
		for _, s := range iptables.SetSpecs {
			if !s.KubeProxy() {
				continue
			}
			if s.Type == iptables.TypeBitmapPort {
				fmt.Fprintf(&b, "create %s %s range 0-65535\n", iptables.SetName(s.Name, fam), s.Type)
			} else {
				fmt.Fprintf(&b, "create %s %s family %s hashsize 1024 maxelem 65536\n", iptables.SetName(s.Name, fam), s.Type, fam)
			}
		}
	}
	return b.String()
}

// kubeProxyTakesBack runs kube-proxy's `ipset create ... -exist` for every
// set: each fails on a set of another maxelem, range or extensions, and
// kube-proxy's sync stops there.
func kubeProxyTakesBack(t testing.TB) {
	t.Helper()
	var errb bytes.Buffer
	cmd := exec.Command("ipset", "-exist", "restore")
	cmd.Stdin, cmd.Stderr = strings.NewReader(kubeProxyCreates()), &errb
	if err := cmd.Run(); err != nil {
		t.Errorf("kube-proxy's ipset create -exist refused the proxy's sets: %v: %s", err, errb.String())
	}
}

// The control for kubeProxyTakesBack: the kernel refuses `create -exist`
// on a set of another maxelem, so the check above can fail.
func kubeProxyRefusesOtherMaxElem(t testing.TB) {
	t.Helper()
	run(t, "ipset", "create", "KUBE-CONTROL", "hash:ip", "family", "inet", "hashsize", "1024", "maxelem", "1048576")
	defer run(t, "ipset", "destroy", "KUBE-CONTROL")
	if out, err := exec.Command("ipset", "create", "KUBE-CONTROL", "hash:ip", "family", "inet", "hashsize", "1024", "maxelem", "65536", "-exist").CombinedOutput(); err == nil {
		t.Errorf("ipset create -exist accepted a set of another maxelem (%s): the take-back check proves nothing", out)
	}
}

// newKernelSyncer is OpenKernel in the current namespace, closed at the
// end of the test.
func newKernelSyncer(t *testing.T) *iptables.Syncer {
	t.Helper()
	a, err := kernel.NewSyncer(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// The takeover, in the kernel: kube-proxy's sets are adopted in
// place (their random initval survives, so none was destroyed or swapped),
// the kernel equals the plan, KUBE-IPVS-OUT-FILTER and its jump are gone,
// kube-proxy's ip6tables chains and KUBE-6-* sets on this IPv4-only node
// are gone, the kubelet's canary chains stay, and kube-proxy's own
// `ipset create -exist` accepts every set afterwards.
func TestKernelTakeoverFromKubeProxy(t *testing.T) {
	inNetns(t, func() {
		loadKubeProxyKernel(t)
		before := initvals(t)
		a := newKernelSyncer(t)
		sets, rules := kubeProxyPlan(t)
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatalf("first Full over kube-proxy's state: %v", err)
		}
		checkKernel(t, sets, rules)
		after := initvals(t)
		for _, s := range sets {
			if !kubeProxyHas(s.Name) { // the proxy's own (created: checkKernel above)
				continue
			}
			if s.Type != iptables.TypeBitmapPort && (before[s.Name] == "" || after[s.Name] != before[s.Name]) {
				t.Errorf("%s: initval %q before, %q after: not adopted in place", s.Name, before[s.Name], after[s.Name])
			}
		}
		if a.SetSwaps() != 0 {
			t.Errorf("%d sets swapped, want every one adopted", a.SetSwaps())
		}
		if h := listHeader(t, iptables.SetClusterIP); h.refs == 0 || h.entries != len(findSet(sets, iptables.SetClusterIP).Entries) {
			t.Errorf("%s: %+v, want the rules' references and the planned entries", iptables.SetClusterIP, h)
		}
		checkTakenOverChains(t, run(t, "iptables-save"), run(t, "ip6tables-save"))
		if out := run(t, "ipset", "list", "-n"); strings.Contains(out, "KUBE-6-") || strings.Contains(out, iptables.SwapSetName) {
			t.Errorf("sets left:\n%s", out)
		}

		// The next Full changes nothing.
		restores := map[string]int64{}
		for family, r := range a.RuleRunners() {
			restores[family] = r.(counted).Restores()
		}
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		for family, r := range a.RuleRunners() {
			if n := r.(counted).Restores() - restores[family]; n != 0 {
				t.Errorf("%s: the Full after the takeover rewrote %d tables", family, n)
			}
		}
		if d := a.LastDrift(); d.Total() != 0 {
			t.Errorf("the Full after the takeover found drift %+v", d)
		}

		kubeProxyRefusesOtherMaxElem(t)
		kubeProxyTakesBack(t)
	})
}

// On a fresh node the proxy's sets are kube-proxy's shape too: kube-proxy
// started after it (the rollback) accepts every one.
func TestKernelKubeProxyAcceptsFreshSets(t *testing.T) {
	inNetns(t, func() {
		a := newKernelSyncer(t)
		sets, rules := dualStackPlan()
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		kubeProxyRefusesOtherMaxElem(t)
		kubeProxyTakesBack(t)
	})
}

// A set the plan outgrows (kube-proxy's KUBE-LOOP-BACK, maxelem 65536,
// held by KUBE-POSTROUTING) is swapped for a larger one by a partial sync,
// with the rule's reference intact and no error; a full sync swaps
// kube-proxy's shape back once 65536 holds the plan, and grows it again.
func TestKernelSetGrowsThroughSwap(t *testing.T) {
	inNetns(t, func() {
		loadKubeProxyKernel(t)
		a := newKernelSyncer(t)
		sets, rules := kubeProxyPlan(t)
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		refs := listHeader(t, iptables.SetLoopBack).refs
		if refs == 0 {
			t.Fatalf("%s has no references: the test would prove nothing", iptables.SetLoopBack)
		}
		lb := findSet(sets, iptables.SetLoopBack)
		small := lb.Entries
		big := loopBack(iptables.KubeProxyMaxElem + 100)
		check := func(step string, maxElem, entries, swaps int) {
			t.Helper()
			if h := listHeader(t, iptables.SetLoopBack); h != (setHeader{maxElem: maxElem, refs: refs, entries: entries}) {
				t.Errorf("%s: %s is %+v, want maxelem %d, %d references, %d entries", step, iptables.SetLoopBack, h, maxElem, refs, entries)
			}
			if a.SetSwaps() != swaps {
				t.Errorf("%s: %d swaps, want %d", step, a.SetSwaps(), swaps)
			}
			if out := run(t, "ipset", "list", "-n"); strings.Contains(out, iptables.SwapSetName) {
				t.Errorf("%s: %s left", step, iptables.SwapSetName)
			}
		}

		lb.Entries = big
		if err := syncErr(a.Partial(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatalf("partial growth past 65536: %v", err)
		}
		check("partial growth", 131072, len(big), 1)
		if out := run(t, "iptables-save", "-t", "nat"); !strings.Contains(out, "--match-set "+iptables.SetLoopBack+" dst,dst,src -j MASQUERADE") {
			t.Errorf("the rule matching %s is gone:\n%s", iptables.SetLoopBack, out)
		}

		lb.Entries = small
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		check("full shrink", iptables.KubeProxyMaxElem, len(small), 2)
		checkKernel(t, sets, rules)
		kubeProxyTakesBack(t)

		lb.Entries = big
		if err := syncErr(a.Full(iptables.Desired{Sets: sets, Rules: rules})); err != nil {
			t.Fatalf("full growth past 65536: %v", err)
		}
		check("full growth", 131072, len(big), 3)
	})
}
