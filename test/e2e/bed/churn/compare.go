package churn

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// The kernel and the plan in comparable forms.

func lines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// snapshot is one view of the node's data plane in the plan's text forms,
// each section sorted (iptables: per chain, in order).
type snapshot map[string][]string

// Run execs one command in the node namespace; what it took is added to
// e.took.
func (e *Env) Run(name string, args ...string) (string, error) {
	return e.timed(strings.Join(append([]string{name}, args...), " "), func() (string, error) { return e.Node.Exec(name, args...) })
}

// timed runs read and adds what it took to e.took, as label.
func (e *Env) timed(label string, read func() (string, error)) (string, error) {
	t0 := time.Now()
	out, err := read()
	fmt.Fprintf(&e.took, ", %s %v", label, time.Since(t0).Round(10*time.Millisecond))
	return out, err
}

// kernel reads the node's data plane; e.took says what each command took.
func (e *Env) kernel() (snapshot, error) {
	e.took.Reset()
	s := snapshot{}
	out, err := e.Run("ipvsadm", "-S", "-n")
	if err != nil {
		return nil, err
	}
	s["ipvs"] = sorted(lines(out))
	out, err = e.Run("ip", "-o", "addr", "show", "dev", "kube-ipvs0")
	if err != nil {
		return nil, err
	}
	for _, l := range lines(out) {
		if f := strings.Fields(l); len(f) >= 4 {
			s["kube-ipvs0"] = append(s["kube-ipvs0"], f[3])
		}
	}
	slices.Sort(s["kube-ipvs0"])
	out, err = e.timed("ipset save", func() (string, error) { return e.Node.IPSetSave() })
	if err != nil {
		return nil, err
	}
	for _, l := range lines(out) {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "add" && strings.HasPrefix(f[1], "KUBE-") {
			s["ipset"] = append(s["ipset"], l)
		} else if len(f) >= 2 && f[0] == "create" && strings.HasPrefix(f[1], "KUBE-") {
			s["ipset"] = append(s["ipset"], "create "+f[1])
		}
	}
	slices.Sort(s["ipset"])
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "filter"} {
			out, err = e.Run(fam+"-save", "-t", table)
			if err != nil {
				return nil, err
			}
			s[fam] = append(s[fam], proxyRules(table, out)...)
		}
	}
	return s, nil
}

// proxyRules keeps the rules of KUBE- chains and the jumps to them, per
// chain in order, chains sorted.
func proxyRules(table, save string) []string {
	byChain := map[string][]string{}
	for _, l := range lines(save) {
		if !strings.HasPrefix(l, "-A ") {
			continue
		}
		f := strings.Fields(l)
		j := slices.Index(f, "-j")
		if strings.HasPrefix(f[1], "KUBE-") || j > 0 && j+1 < len(f) && strings.HasPrefix(f[j+1], "KUBE-") {
			byChain[f[1]] = append(byChain[f[1]], l)
		}
	}
	out := []string{"*" + table}
	for _, c := range slices.Sorted(maps.Keys(byChain)) {
		out = append(out, byChain[c]...)
	}
	return out
}

func sorted(s []string) []string { slices.Sort(s); return s }

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// nodeIPs are the node's addresses on every interface but kube-ipvs0, as
// `run` reads them: plan gets the same as --node-ip.
func (e *Env) nodeIPs() (string, error) {
	out, err := e.Run("ip", "-o", "addr", "show")
	if err != nil {
		return "", err
	}
	var ips []string
	for _, l := range lines(out) {
		f := strings.Fields(l)
		if len(f) >= 4 && f[1] != "kube-ipvs0" {
			ips = append(ips, strings.Split(f[3], "/")[0])
		}
	}
	return strings.Join(ips, ","), nil
}

// plan runs `ipvs-proxy plan` on the objects in file with the node's
// identity and run's flags, in the kernel's forms.
func (e *Env) plan(file string) (snapshot, string, error) {
	ips, err := e.nodeIPs()
	if err != nil {
		return nil, "", err
	}
	args := []string{"plan", "-f", file, "--node-name", thisNode, "--node-ip", ips,
		"--cluster-cidr", clusterCIDR, "--api-server-address", "127.0.0.1"}
	// The proxy's node address cache, once written: a Node deleted from
	// the API stays protected for --deleted-node-grace-period (24 h), and
	// plan honours the same history with it.
	if cache := filepath.Join(e.stateDir, informers.NodeAddressFile); fileExists(cache) {
		args = append(args, "--node-cache", cache)
	}
	out, err := exec.Command(e.bin, args...).Output()
	if err != nil {
		return nil, "", fmt.Errorf("ipvs-proxy plan: %w", err)
	}
	s := snapshot{}
	section := ""
	table := ""
	byChain := map[string]map[string][]string{}
	for _, l := range lines(string(out)) {
		if strings.HasPrefix(l, "# ") {
			section = strings.TrimPrefix(l, "# ")
			continue
		}
		switch section {
		case "ipvs", "kube-ipvs0":
			s[section] = append(s[section], l)
		case "ipset":
			f := strings.Fields(l)
			if f[0] == "create" {
				l = "create " + f[1]
			}
			s["ipset"] = append(s["ipset"], l)
		case "iptables", "ip6tables":
			if strings.HasPrefix(l, "*") {
				table = l
				continue
			}
			if !strings.HasPrefix(l, "-A ") {
				continue
			}
			k := section + " " + table
			if byChain[k] == nil {
				byChain[k] = map[string][]string{}
			}
			ch := strings.Fields(l)[1]
			byChain[k][ch] = append(byChain[k][ch], l)
		}
	}
	for _, sec := range []string{"ipvs", "kube-ipvs0", "ipset"} {
		slices.Sort(s[sec])
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, tb := range []string{"nat", "filter"} {
			s[fam] = append(s[fam], "*"+tb)
			m := byChain[fam+" *"+tb]
			for _, c := range slices.Sorted(maps.Keys(m)) {
				s[fam] = append(s[fam], m[c]...)
			}
		}
	}
	return s, string(out), nil
}

// diff names what differs, section by section. It is linear in the
// sections' lengths: at 10,000 services the IPVS section has 110,000 lines.
func diff(plan, kernel snapshot) string {
	var b strings.Builder
	for _, sec := range []string{"ipvs", "kube-ipvs0", "ipset", "iptables", "ip6tables"} {
		p, k := plan[sec], kernel[sec]
		if slices.Equal(p, k) {
			continue
		}
		fmt.Fprintf(&b, "%s:\n", sec)
		inP, inK := set(p), set(k)
		for _, l := range p {
			if !inK[l] {
				fmt.Fprintf(&b, "  missing: %s\n", l)
			}
		}
		for _, l := range k {
			if !inP[l] {
				fmt.Fprintf(&b, "  extra:   %s\n", l)
			}
		}
		if (len(p) != len(k) || slices.Equal(sorted(slices.Clone(p)), sorted(slices.Clone(k)))) && len(p)+len(k) <= 80 {
			// The same rules in another order or count: show both.
			fmt.Fprintf(&b, "  plan:   %q\n  kernel: %q\n", p, k)
		}
		if b.Len() > 4000 {
			break
		}
	}
	return b.String()
}

func set(lines []string) map[string]bool {
	m := make(map[string]bool, len(lines))
	for _, l := range lines {
		m[l] = true
	}
	return m
}

// firstSyncLine is logged by the proxy once its first full sync applied
// everything.
const firstSyncLine = "first full sync applied"

// Converge waits until the kernel equals the plan of the current objects.
func (e *Env) Converge(c *Cluster, p *ktest.Process) (time.Duration, string) {
	start := time.Now()
	timeout := cmp.Or(e.ConvergeTimeout, convergeTimeout)
	last := ""
	// A comparison waits for the proxy's first full sync: before it the
	// kernel cannot hold the plan (or holds what a killed proxy left, which
	// must not count as this run's), and at 10,000 services under TCG each
	// comparison takes minutes of the CPU the first sync needs.
	for !p.OutputHas(firstSyncLine) {
		if !p.Alive() {
			return time.Since(start), "proxy exited before its first full sync: see " + p.Log + "\n" + p.Tail(40)
		}
		if time.Since(start) >= timeout {
			return time.Since(start), "no first full sync within " + timeout.String() + "\nproxy log tail:\n" + p.Tail(40)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for time.Since(start) < timeout {
		if !p.Alive() {
			return time.Since(start), "proxy exited: see " + p.Log + "\n" + p.Tail(40)
		}
		at := time.Since(start)
		d, took, err := e.compare(c)
		if slow := time.Since(start) - at; slow > 10*time.Second {
			e.t.Logf("converge: the comparison begun at %v took %v (%s)", at.Round(time.Second), slow.Round(time.Second), took)
		}
		switch {
		case err != nil:
			last = err.Error()
		case d == "":
			e.LastDiff = last
			return time.Since(start), ""
		default:
			last = fmt.Sprintf("(at %v, %s)\n%s", at.Round(time.Second), took, d)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Since(start), "did not converge within " + timeout.String() + ":\n" + last + "\nproxy log tail:\n" + p.Tail(40)
}

// compare reads the objects, plans them and reads the kernel once: what
// differs ("" for nothing) and what each step took.
func (e *Env) compare(c *Cluster) (string, string, error) {
	file := filepath.Join(e.dir, "objects.json")
	t0 := time.Now()
	if err := c.dump(file); err != nil {
		return "", "", err
	}
	t1 := time.Now()
	want, _, err := e.plan(file)
	if err != nil {
		return "", "", err
	}
	t2 := time.Now()
	got, err := e.kernel()
	if err != nil {
		return "", "", err
	}
	t3 := time.Now()
	if !slices.ContainsFunc(want["ipvs"], func(l string) bool { return strings.HasPrefix(l, "-A -t "+e.WebAddr+" ") }) {
		return "", "", fmt.Errorf("the plan has no virtual server for the steady service %s", e.WebAddr)
	}
	d := diff(want, got)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return d, fmt.Sprintf("objects read in %v, planned in %v, kernel read in %v (%s), compared in %v",
		r(t1.Sub(t0)), r(t2.Sub(t1)), r(t3.Sub(t2)), strings.TrimPrefix(e.took.String(), ", "), r(time.Since(t3))), nil
}

func FirstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = append(ls[:n], "...")
	}
	return strings.Join(ls, "\n")
}

// RemoveLeakedVS deletes the virtual servers a convergence diff lists as
// extra (`ipvsadm -D`) and returns how many it deleted.
func (e *Env) RemoveLeakedVS(d string) int {
	n := 0
	for _, l := range lines(d) {
		f := strings.Fields(l)
		// "extra: -A -t 198.51.100.1:80 -s rr"
		if len(f) >= 4 && f[0] == "extra:" && f[1] == "-A" {
			if _, err := e.Run("ipvsadm", "-D", f[2], f[3]); err == nil {
				n++
			}
		}
	}
	return n
}
