package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

// Sentinel errors of a Table. The kernel implementation maps EEXIST and
// ENOENT/ESRCH to them, so callers check with errors.Is whatever the backend.
var (
	// ErrExists is returned when adding a virtual or real server that is
	// already there (EEXIST).
	ErrExists = errors.New("already exists")
	// ErrNotFound is returned when changing or deleting a virtual or real
	// server that is not there (ESRCH / ENOENT).
	ErrNotFound = errors.New("not found")
	// ErrExcluded is returned by the reconciler for a desired virtual server
	// inside --ipvs-exclude-cidrs: it is never touched.
	ErrExcluded = errors.New("inside --ipvs-exclude-cidrs")
)

// RealServerStatus is a real server as the kernel reports it, with its
// connection counters: one line of `ipvsadm -L -n -t VIP:PORT`.
type RealServerStatus struct {
	RealServer
	ActiveConns   int
	InactiveConns int
}

// Table is the node's IPVS table as the reconciler sees it. The kernel
// implementation is *Kernel (github.com/moby/ipvs over one generic netlink
// socket); *FakeTable is a stateful in-memory table for unit tests.
//
// Virtual servers are created, updated and deleted without their real
// servers; real servers are managed one by one.
type Table interface {
	// Services returns the whole table: every virtual server with its real
	// servers at their current weights, as `ipvsadm -S -n` shows it.
	// Firewall-mark services are not returned (the proxy never makes them).
	Services() ([]VirtualServer, error)
	// RealServers returns one virtual server's real servers with their
	// connection counters: `ipvsadm -L -n -t VIP:PORT`.
	RealServers(k Key) ([]RealServerStatus, error)
	// AddService is `ipvsadm -A -t VIP:PORT -s SCHED [-p TIMEOUT]`.
	AddService(vs VirtualServer) error
	// UpdateService is `ipvsadm -E -t VIP:PORT -s SCHED [-p TIMEOUT]`.
	UpdateService(vs VirtualServer) error
	// DelService is `ipvsadm -D -t VIP:PORT`; it removes the real servers too.
	DelService(k Key) error
	// AddRealServer is `ipvsadm -a -t VIP:PORT -r ADDR:PORT -m -w WEIGHT`.
	AddRealServer(k Key, rs RealServer) error
	// UpdateRealServer is `ipvsadm -e -t VIP:PORT -r ADDR:PORT -m -w WEIGHT`.
	UpdateRealServer(k Key, rs RealServer) error
	// DelRealServer is `ipvsadm -d -t VIP:PORT -r ADDR:PORT`.
	DelRealServer(k Key, rs RealServer) error
}

// String renders the key as ipvsadm names a service: "-t 10.96.0.10:80",
// "-u [fd00::a]:53", "--sctp-service 10.96.0.12:9".
func (k Key) String() string {
	return protoFlag(k.Protocol) + " " + hostPort(k.Address, k.Port)
}

func protoFlag(p model.Protocol) string {
	switch p {
	case model.UDP:
		return "-u"
	case model.SCTP:
		return "--sctp-service"
	default:
		return "-t"
	}
}

func hostPort(a netip.Addr, port uint16) string {
	return netip.AddrPortFrom(a, port).String()
}

// CompareKeys orders keys by address, protocol and port.
func CompareKeys(a, b Key) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

func compareRealServers(a, b RealServer) int {
	if c := a.Address.Compare(b.Address); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// Save renders virtual servers in `ipvsadm -S -n` form, sorted, one
// "-A" line per virtual server followed by its "-a" lines. Persistence
// timeout and scheduler flags are printed as ipvsadm prints them.
func Save(vss []VirtualServer) string {
	vss = slices.Clone(vss)
	slices.SortFunc(vss, func(a, b VirtualServer) int { return CompareKeys(a.Key, b.Key) })
	var b strings.Builder
	for _, vs := range vss {
		fmt.Fprintf(&b, "-A %s -s %s", vs.Key, vs.Scheduler)
		if f := schedFlagNames(vs.Scheduler, vs.Flags); f != "" {
			fmt.Fprintf(&b, " -b %s", f)
		}
		if vs.Flags&FlagPersistent != 0 {
			fmt.Fprintf(&b, " -p %d", vs.PersistenceTimeout)
		}
		b.WriteByte('\n')
		rss := slices.Clone(vs.RealServers)
		slices.SortFunc(rss, compareRealServers)
		for _, rs := range rss {
			fmt.Fprintf(&b, "-a %s -r %s -m -w %d\n", vs.Key, hostPort(rs.Address, rs.Port), rs.Weight)
		}
	}
	return b.String()
}

// schedFlagNames names scheduler flags as ipvsadm -b does: sh-fallback and
// sh-port for sh, mh-fallback and mh-port for mh, flag-1 and flag-2 otherwise.
func schedFlagNames(sched string, f Flags) string {
	one, two := "flag-1", "flag-2"
	if sched == "sh" || sched == "mh" {
		one, two = sched+"-fallback", sched+"-port"
	}
	var names []string
	if f&FlagSchedSH1 != 0 {
		names = append(names, one)
	}
	if f&FlagSchedSH2 != 0 {
		names = append(names, two)
	}
	return strings.Join(names, ",")
}
