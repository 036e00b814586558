package model

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of ports: 22-22 is port 22.
type PortRange struct{ First, Last uint16 }

// Contains says whether p is in the range.
func (r PortRange) Contains(p uint16) bool { return p >= r.First && p <= r.Last }

// String is "22" or "2379-2380".
func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return strconv.Itoa(int(r.First)) + "-" + strconv.Itoa(int(r.Last))
}

// ParsePortRanges parses a comma-separated list of ports and inclusive
// ranges ("22,2379-2380"), 1-65535; blanks are skipped.
func ParsePortRanges(s string) ([]PortRange, error) {
	var out []PortRange
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(f, "-")
		first, err1 := strconv.ParseUint(lo, 10, 16)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.ParseUint(hi, 10, 16)
		}
		if err1 != nil || err2 != nil || first == 0 || last < first {
			return nil, fmt.Errorf("%q is not a port (1-65535) or a range of ports (2379-2380)", f)
		}
		out = append(out, PortRange{uint16(first), uint16(last)})
	}
	return out, nil
}
