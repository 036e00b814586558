//go:build kernel

package takeover

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
)

// kubeProxyMode is TAKEOVER_MODE: the mode kube-proxy runs in before the
// takeover and after the way back ("" is ipvs; iptables, nftables). The
// takeover and the way back are the same steps in every mode; what differs
// is what kube-proxy leaves (checkModeGone), how it starts again
// (noModules) and, after iptables and nftables mode, the way out (wayOut).
func kubeProxyMode(t *testing.T) string {
	switch m := os.Getenv("TAKEOVER_MODE"); m {
	case "", "ipvs":
		return ""
	case "iptables", "nftables":
		return m
	default:
		t.Fatalf("TAKEOVER_MODE=%q: want ipvs, iptables or nftables", m)
		return ""
	}
}

// noModules says whether kube-proxy starts after the takeover with an
// empty /lib/modules, as docs/migration.md's way out to nftables mode has
// it: nftables mode's start-up cleanup then leaves IPVS and kube-ipvs0
// serving until its own rules do (kubeproxy.Options.NoModules).
func (b *bed) noModules() bool { return b.mode == "nftables" }

// periodicSyncs says whether kube-proxy syncs every syncPeriod (IPVS mode)
// rather than only on changes, with an hourly resync (iptables mode).
func (b *bed) periodicSyncs() bool { return b.mode == "" }

// servedWithin polls the ClusterIP of a Service addService made until
// pod-a answers on port 80, and returns how long that took.
func (b *bed) servedWithin(clusterIP string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		out, err := b.client.Request("tcp", hostPort(clusterIP, 80))
		if err == nil && answeredBy(out, []string{"pod-a"}) {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("%s:80 not answered by pod-a within %v: %q %v", clusterIP, timeout, out, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// iptablesModeChain matches a chain of kube-proxy's iptables mode that
// ipvs-proxy does not plan, declared or jumped to, in iptables-save.
var iptablesModeChain = regexp.MustCompile(`KUBE-(SVC|SVL|SEP|EXT|FW)-[A-Z0-9]+|KUBE-NODEPORTS|KUBE-EXTERNAL-SERVICES|KUBE-PROXY-CANARY`)

// leftByMode is text, the kernel in plan form, less what kube-proxy's
// mode leaves that no proxy of the node owns afterwards: iptables mode's
// filter KUBE-FIREWALL ("block incoming localnet connections") and its
// jumps, which guard the net.ipv4.conf.all.route_localnet=1 it set
// (CVE-2020-8558), so ipvs-proxy leaves both (checkModeGone checks the
// chain holds only that).
func (b *bed) leftByMode(text string) string {
	if b.mode != "iptables" {
		return text
	}
	var out []string
	for _, l := range strings.SplitAfter(text, "\n") {
		if !strings.Contains(l, "KUBE-FIREWALL") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// localnetRule is the one rule of kube-proxy's KUBE-FIREWALL (IPv4; the
// IPv6 chain is empty).
const localnetRule = `-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`

// saveIPTablesMode logs kube-proxy's iptables-save of the node (both
// families) between markers: the real counterpart of the hand-written
// iptables/testdata/kube-proxy-1.34-iptables, for whoever refreshes it.
func (b *bed) saveIPTablesMode() {
	if b.mode != "iptables" {
		return
	}
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		out, err := b.node.Exec(bin)
		b.t.Logf("KUBE-PROXY-%s-BEGIN (%v)\n%sKUBE-PROXY-%s-END", strings.ToUpper(bin), err, stripCounters(out), strings.ToUpper(bin))
	}
}

// checkModeGone, after a takeover from iptables mode, checks that neither
// family holds a chain of kube-proxy's iptables mode or a jump to one (the
// kernel equal to `ipvs-proxy plan` says as much; this names what is
// left); from nftables mode, that kube-proxy's tables are gone.
func (b *bed) checkModeGone() string {
	switch b.mode {
	case "nftables":
		out, err := b.node.Exec("nft", "list", "tables")
		if err != nil || strings.Contains(out, "kube-proxy") {
			b.t.Errorf("kube-proxy's nftables tables after the takeover (nft list tables: %v):\n%s", err, out)
		}
		return fmt.Sprintf("nftables tables after the takeover: %q\n", strings.TrimSpace(out))
	case "":
		return ""
	}
	var left []string
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		out, err := b.node.Exec(bin)
		if err != nil {
			b.t.Errorf("%s: %v", bin, err)
		}
		for _, l := range strings.Split(out, "\n") {
			if iptablesModeChain.MatchString(l) {
				left = append(left, bin+": "+l)
			}
			if strings.HasPrefix(l, "-A KUBE-FIREWALL") && l != localnetRule {
				b.t.Errorf("%s: KUBE-FIREWALL holds more than kube-proxy's localnet rule: %s", bin, l)
			}
		}
	}
	if len(left) > 0 {
		b.t.Errorf("kube-proxy's iptables-mode chains left after the takeover:\n%s", strings.Join(firstN(left, 40), "\n"))
	}
	return fmt.Sprintf("kube-proxy's iptables-mode chains and jumps left after the takeover: %d\n", len(left))
}

// ipvsProxyOnly matches what only ipvs-proxy writes: its own chains, and
// rules matching its ipsets.
var ipvsProxyOnly = regexp.MustCompile(`KUBE-NODE-PORT\b|KUBE-LOAD-BALANCER|KUBE-IPVS-FILTER|KUBE-IPVS-OUT-FILTER|KUBE-SOURCE-RANGES-FIREWALL|match-set`)

// wayOut is step 4 on the way out to kube-proxy's iptables or nftables
// mode: with kube-proxy serving the node in that mode (the rollback),
// `ipvs-proxy cleanup --kube-proxy-mode MODE` removes what ipvs-proxy left
// under traffic: then no virtual server, no kube-ipvs0, no ipset, no chain
// or rule of ipvs-proxy's is left, every request is served, and kube-proxy
// serves a Service created afterwards (its nftables tables still there).
func (b *bed) wayOut(kp *kubeproxy.Process) string {
	c := b.cleanupUnderTraffic(kp, "cleanup", "--kube-proxy-mode", b.mode)
	if c.err != nil {
		b.t.Errorf("ipvs-proxy cleanup --kube-proxy-mode %s: %v\n%s", b.mode, c.err, c.out)
	}
	var left []string
	for _, l := range strings.Split(c.after, "\n") {
		if strings.HasPrefix(l, "###") {
			continue // dumpKernel's headers
		}
		if ipvsProxyOnly.MatchString(l) || strings.HasPrefix(l, "-A -") || strings.HasPrefix(l, "create ") || strings.Contains(l, " kube-ipvs0 ") {
			left = append(left, l)
		}
	}
	if len(left) > 0 {
		b.t.Errorf("ipvs-proxy's state left after the way out:\n%s", strings.Join(firstN(left, 40), "\n"))
	}
	tables := ""
	if b.mode == "nftables" {
		out, err := b.node.Exec("nft", "list", "tables")
		if err != nil || !strings.Contains(out, "table ip kube-proxy") || !strings.Contains(out, "table ip6 kube-proxy") {
			b.t.Errorf("kube-proxy's nftables tables after the way out (nft list tables: %v):\n%s", err, out)
		}
		tables = fmt.Sprintf("; nftables tables %q", strings.Join(strings.Fields(out), " "))
	}
	return fmt.Sprintf("way out to %s mode: %s; ipvs-proxy's lines left %d%s; %s", b.mode, strings.TrimSpace(c.out), len(left), tables, c.summary())
}

// defaultRoute gives the node namespace a default route via the LAN, as a
// real node has, when kube-proxy runs in iptables or nftables mode: their
// DNAT in output comes after the route lookup, so the node's own
// connections to a ClusterIP need a route to it (IPVS mode binds them
// locally instead).
func (b *bed) defaultRoute() {
	if b.mode == "" {
		return
	}
	for _, a := range b.lan.Addrs {
		args := []string{"route", "add", "default", "via", a.String()}
		if a.Is6() {
			args = append([]string{"-6"}, args...)
		}
		b.node.Run(b.t, "ip", args...)
	}
}
