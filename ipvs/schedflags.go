package ipvs

import (
	"errors"
	"fmt"
	"strings"
)

// FlagSched3 is IP_VS_SVC_F_SCHED3: ipvsadm -b flag-3; no scheduler the
// kernel ships reads it.
const FlagSched3 Flags = 0x20

// schedFlagBits are IP_VS_SVC_F_SCHED1..3 in ipvsadm's -b order.
var schedFlagBits = [3]Flags{FlagSchedSH1, FlagSchedSH2, FlagSched3}

// ErrSchedulerFlag is a scheduler flag name the scheduler does not read.
var ErrSchedulerFlag = errors.New("not a flag of the scheduler")

// SchedulerFlagNames are the names ipvsadm -b gives IP_VS_SVC_F_SCHED1..3
// under scheduler sched: sh and mh read the first two as fallback and port
// hashing; every other scheduler reads none, so they keep generic names.
func SchedulerFlagNames(sched string) [3]string {
	if sched == "sh" || sched == "mh" {
		return [3]string{sched + "-fallback", sched + "-port", "flag-3"}
	}
	return [3]string{"flag-1", "flag-2", "flag-3"}
}

// SchedulerFlags are the flags a virtual server with scheduler sched gets
// when its Service names none. mh hashes the source port too (`-b mh-port`,
// as kube-proxy sets for mh) and falls back to the next real server in its
// table when the one hashed to is quiesced (`-b mh-fallback`): without it a
// weight-0 real server — every TCP backend during graceful termination —
// makes IPVS drop the connections hashed to it ("no destination
// available"). Every other scheduler gets none.
func SchedulerFlags(sched string) Flags {
	if sched == "mh" {
		return FlagSchedSH1 | FlagSchedSH2
	}
	return 0
}

// ParseSchedulerFlags parses a comma-separated list of the flags sched reads
// (`mh-fallback,mh-port` for mh, `sh-fallback,sh-port` for sh), the form of
// the annotation ipvs-proxy.io/scheduler-flags; blanks around names are
// ignored. A name sched does not read, including any under a scheduler that
// reads none, is an error wrapping ErrSchedulerFlag.
func ParseSchedulerFlags(sched, list string) (Flags, error) {
	var f Flags
	names := SchedulerFlagNames(sched)
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		i := 0
		for i < 2 && names[i] != n {
			i++
		}
		if i == 2 || sched != "sh" && sched != "mh" {
			reads := "none"
			if sched == "sh" || sched == "mh" {
				reads = names[0] + ", " + names[1]
			}
			return 0, fmt.Errorf("%q: %w %s (it reads %s)", n, ErrSchedulerFlag, sched, reads)
		}
		f |= schedFlagBits[i]
	}
	return f, nil
}

// AppendSchedulerFlags appends f's scheduler flags as ipvsadm -b lists them
// under sched ("mh-fallback,mh-port"); nothing when f has none.
func AppendSchedulerFlags(b []byte, sched string, f Flags) []byte {
	names := SchedulerFlagNames(sched)
	first := true
	for i, bit := range schedFlagBits {
		if f&bit == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, names[i]...)
	}
	return b
}
