package ipvs

import (
	"strconv"
	"strings"
)

// Sysctl is one kernel setting under /proc/sys, e.g. "net/ipv4/vs/conntrack".
type Sysctl struct {
	Name  string
	Value int
}

// The kernel versions around net.ipv4.vs.conn_reuse_mode, as kube-proxy
// uses them: before 4.1 the setting does not exist; from 5.9 on (commit
// 35dfb013149f "ipvs: queue delayed work to expire no destination
// connections if expire_nodest_conn=1") the default 1 no longer causes the
// one-second delay on port reuse, so it is left as it is; in between it is
// set to 0.
var (
	connReuseMinKernel   = [2]int{4, 1}
	connReuseFixedKernel = [2]int{5, 9}
)

// KernelSysctls returns the sysctls kube-proxy's IPVS mode sets, for the
// kernel release (uname -r) given:
//
//	net/ipv4/vs/conntrack=1                  (iptables sees IPVS flows: masquerade)
//	net/ipv4/vs/conn_reuse_mode=0            (kernels 4.1 to 5.8 only)
//	net/ipv4/vs/expire_nodest_conn=1         (drop flows of deleted real servers)
//	net/ipv4/vs/expire_quiescent_template=1  (persistence ends at weight 0)
//	net/ipv4/ip_forward=1
//	net/ipv4/conf/all/arp_ignore=1, arp_announce=2  (with --ipvs-strict-arp)
func KernelSysctls(release string, strictARP bool) []Sysctl {
	out := []Sysctl{{"net/ipv4/vs/conntrack", 1}}
	if v, ok := parseRelease(release); ok && !less(v, connReuseMinKernel) && less(v, connReuseFixedKernel) {
		out = append(out, Sysctl{"net/ipv4/vs/conn_reuse_mode", 0})
	}
	out = append(out,
		Sysctl{"net/ipv4/vs/expire_nodest_conn", 1},
		Sysctl{"net/ipv4/vs/expire_quiescent_template", 1},
		Sysctl{"net/ipv4/ip_forward", 1},
	)
	if strictARP {
		out = append(out, Sysctl{"net/ipv4/conf/all/arp_ignore", 1}, Sysctl{"net/ipv4/conf/all/arp_announce", 2})
	}
	return out
}

func less(v, w [2]int) bool { return v[0] < w[0] || (v[0] == w[0] && v[1] < w[1]) }

// parseRelease reads "6.1.0-56-amd64" as {6, 1}.
func parseRelease(r string) ([2]int, bool) {
	parts := strings.SplitN(r, ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(c rune) bool { return c < '0' || c > '9' }); i >= 0 {
		minor = minor[:i]
	}
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return [2]int{}, false
	}
	return [2]int{major, mi}, true
}
