package takeover

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// A dial whose SYNs the node forwarded and that got no SYN-ACK, or a
// segment a pod never answered, leaves the capture with no verdict: the
// pod's own kernel may have dropped it (a full accept queue) or rejected
// it (PAWS against the TIME_WAIT of an earlier connection of the same
// ports). Its TCP counters say which; the evidence prints them.

// tcpDrops are the counters of `nstat -az` (/proc/net/netstat and
// /proc/net/snmp) of ns whose name says they count a segment dropped,
// rejected or skipped, and which are not zero: "ListenOverflows 3".
func tcpDrops(ns *ktest.NS) (string, error) {
	var netstat, snmp []byte
	err := ns.Do(func() error {
		var err error
		if netstat, err = os.ReadFile("/proc/thread-self/net/netstat"); err != nil {
			return err
		}
		snmp, err = os.ReadFile("/proc/thread-self/net/snmp")
		return err
	})
	if err != nil {
		return "", fmt.Errorf("TCP counters of %s: %w", ns.Name, err)
	}
	c := procCounters(string(netstat) + string(snmp))
	var out []string
	for _, name := range slices.Sorted(maps.Keys(c)) {
		if c[name] != 0 && dropCounter(name) {
			out = append(out, fmt.Sprintf("%s %d", name, c[name]))
		}
	}
	if len(out) == 0 {
		return "none", nil
	}
	return strings.Join(out, ", "), nil
}

// dropCounter tells whether a TcpExt or Tcp counter name says it counts
// segments dropped, rejected or not answered.
func dropCounter(name string) bool {
	if !strings.HasPrefix(name, "TcpExt") && !strings.HasPrefix(name, "Tcp") {
		return false
	}
	for _, w := range []string{"Drop", "Overflow", "PAWS", "Skipped", "Challenge", "Fail", "InErrs", "Csum", "Reset", "Rsts"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// procCounters reads the pairs of lines of /proc/net/netstat and
// /proc/net/snmp ("TcpExt: SyncookiesSent ..." then "TcpExt: 0 ...") into
// counters named as nstat names them ("TcpExtListenOverflows").
func procCounters(text string) map[string]int64 {
	out := map[string]int64{}
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) < 2 || len(names) != len(values) || names[0] != values[0] {
			continue
		}
		if _, err := strconv.ParseInt(values[1], 10, 64); err != nil {
			continue // two header lines
		}
		prefix := strings.TrimSuffix(names[0], ":")
		for j := 1; j < len(names); j++ {
			if v, err := strconv.ParseInt(values[j], 10, 64); err == nil {
				out[prefix+names[j]] = v
			}
		}
		i++
	}
	return out
}
