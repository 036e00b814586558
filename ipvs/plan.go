package ipvs

import (
	"bytes"
	"io"
	"net/netip"
	"slices"
	"strconv"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// DefaultScheduler is --ipvs-scheduler's default: round robin.
const DefaultScheduler = "rr"

// DefaultWeight is the weight of every real server the proxy plans.
const DefaultWeight = 1

// Schedulers are the IPVS schedulers Debian's 6.1 kernel ships as modules
// (CONFIG_IP_VS_*=m in config-6.1.0-*-amd64); "twos" is not built there and
// is refused like any unknown name.
var Schedulers = []string{"dh", "fo", "lblc", "lblcr", "lc", "mh", "nq", "ovf", "rr", "sed", "sh", "wlc", "wrr"}

// KnownScheduler reports whether name is one of Schedulers.
func KnownScheduler(name string) bool {
	_, ok := slices.BinarySearch(Schedulers, name)
	return ok
}

// CompareKeys orders keys by address (IPv4 before IPv6), then port, then
// protocol name. It is the order of the plan's `# ipvs` section; ipvsadm -S
// prints in kernel hash order, so readers sort before comparing.
func CompareKeys(a, b Key) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	if a.Port != b.Port {
		if a.Port < b.Port {
			return -1
		}
		return 1
	}
	switch {
	case a.Protocol < b.Protocol:
		return -1
	case a.Protocol > b.Protocol:
		return 1
	}
	return 0
}

// CompareRealServers orders real servers by address, then port; ipvsadm
// itself sorts destinations this way.
func CompareRealServers(a, b RealServer) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// Sort sorts virtual servers by CompareKeys and each one's real servers by
// CompareRealServers.
func Sort(vss []VirtualServer) {
	slices.SortFunc(vss, func(a, b VirtualServer) int { return CompareKeys(a.Key, b.Key) })
	for i := range vss {
		slices.SortFunc(vss[i].RealServers, CompareRealServers)
	}
}

// protoSwitch is ipvsadm's service switch for a protocol (-t, -u,
// --sctp-service); an unknown protocol is named, never taken for TCP.
func protoSwitch(p model.Protocol) string {
	switch p {
	case model.TCP:
		return "-t"
	case model.UDP:
		return "-u"
	case model.SCTP:
		return "--sctp-service"
	}
	return "--" + string(p) + "-service"
}

// AppendAddrPort appends ADDR:PORT as ipvsadm -n prints it: IPv6 in brackets.
func AppendAddrPort(b []byte, a netip.Addr, port uint16) []byte {
	if a.Is6() {
		b = append(b, '[')
		b = a.WithZone("").AppendTo(b)
		b = append(b, ']')
	} else {
		b = a.AppendTo(b)
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(port), 10)
}

// AppendSave appends vs in `ipvsadm -S -n` form: the `-A` line, then one `-a`
// line per real server in the order given (Sort them first to match ipvsadm,
// which sorts destinations). Forwarding is always masquerading (-m). The
// options follow ipvsadm 1.31's print order: `-s SCHED`, `-p TIMEOUT`, then
// `-b FLAGS` (e.g. `-A -t 10.96.0.10:80 -s mh -p 10800 -b mh-port`). No `-M`
// is printed: the applier must create persistent services with the full
// netmask (255.255.255.255 or 128), as kube-proxy does.
func AppendSave(b []byte, vs *VirtualServer) []byte {
	b = append(b, "-A "...)
	svc := len(b)
	b = append(b, protoSwitch(vs.Protocol)...)
	b = append(b, ' ')
	b = AppendAddrPort(b, vs.Address, vs.Port)
	svcEnd := len(b)
	b = append(b, " -s "...)
	b = append(b, vs.Scheduler...)
	if vs.Flags&FlagPersistent != 0 {
		b = append(b, " -p "...)
		b = strconv.AppendUint(b, uint64(vs.PersistenceTimeout), 10)
	}
	if vs.Flags&(FlagSchedSH1|FlagSchedSH2|FlagSched3) != 0 {
		b = append(b, " -b "...)
		b = AppendSchedulerFlags(b, vs.Scheduler, vs.Flags)
	}
	b = append(b, '\n')
	// The service part of the -A line, reused verbatim by every -a line.
	for _, rs := range vs.RealServers {
		b = append(b, "-a "...)
		b = append(b, b[svc:svcEnd]...)
		b = append(b, " -r "...)
		b = AppendAddrPort(b, rs.Address, rs.Port)
		b = append(b, " -m -w "...)
		b = strconv.AppendInt(b, int64(rs.Weight), 10)
		b = append(b, '\n')
	}
	return b
}

// WriteSave writes vss in `ipvsadm -S -n` form, in the order given.
func WriteSave(w io.Writer, vss []VirtualServer) error {
	var buf bytes.Buffer
	b := make([]byte, 0, 4096)
	for i := range vss {
		b = AppendSave(b[:0], &vss[i])
		buf.Write(b)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
