package ipvs

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
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
// socket); ipvstest.FakeTable is a stateful in-memory one for unit tests.
//
// Virtual servers are created, updated and deleted without their real
// servers. Creations go in batches (AddServices, AddRealServers: one round
// trip for many in the kernel's table), the rest one by one.
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
	// AddServices is AddService for each of vss, sent together where the
	// table can, as AddRealServers. It calls each with every virtual
	// server's outcome, in order.
	AddServices(vss []VirtualServer, each func(i int, err error))
	// UpdateService is `ipvsadm -E -t VIP:PORT -s SCHED [-p TIMEOUT]`.
	UpdateService(vs VirtualServer) error
	// DelService is `ipvsadm -D -t VIP:PORT`; it removes the real servers too.
	DelService(k Key) error
	// AddRealServer is `ipvsadm -a -t VIP:PORT -r ADDR:PORT -m -w WEIGHT`.
	AddRealServer(k Key, rs RealServer) error
	// AddRealServers is AddRealServer for each of rss, sent together
	// where the table can (the kernel's: many requests to a sendmsg, each
	// acknowledged on its own). It calls each with every real server's
	// outcome, in order: one's failure does not stop the others.
	AddRealServers(k Key, rss []RealServer, each func(i int, err error))
	// UpdateRealServer is `ipvsadm -e -t VIP:PORT -r ADDR:PORT -m -w WEIGHT`.
	UpdateRealServer(k Key, rs RealServer) error
	// DelRealServer is `ipvsadm -d -t VIP:PORT -r ADDR:PORT`.
	DelRealServer(k Key, rs RealServer) error
}

// CounterReader is a Table that also reads the connection counters of every
// real server at once: the kernel with one read of /proc/net/ip_vs. The
// graceful-termination queue uses it instead of one RealServers dump per
// virtual server when several virtual servers wait.
type CounterReader interface {
	// AllRealServers is `ipvsadm -L -n` for the whole table.
	AllRealServers() (map[Key][]RealServerStatus, error)
}

// Walker is a Table that lists its virtual servers one at a time, so that
// a full sync's read compares each with the mirror as it comes and keeps
// only those that differ (Dump) instead of the whole table: the kernel's,
// streaming the /proc listing.
type Walker interface {
	// EachService calls fn for every virtual server of the table, as
	// Services would return them, each once. vs and its real-server list
	// are valid only during the call.
	EachService(fn func(vs *VirtualServer)) error
}

// String renders the key as ipvsadm names a service: "-t 10.96.0.10:80",
// "-u [fd00::a]:53", "--sctp-service 10.96.0.12:9".
func (k Key) String() string {
	return protoSwitch(k.Protocol) + " " + hostPort(k.Address, k.Port)
}

func hostPort(a netip.Addr, port uint16) string {
	return netip.AddrPortFrom(a, port).String()
}

// Save renders virtual servers in `ipvsadm -S -n` form, in the plan's
// order (Sort), with the plan's formatter (WriteSave).
func Save(vss []VirtualServer) string {
	vss = slices.Clone(vss)
	for i := range vss {
		vss[i].RealServers = slices.Clone(vss[i].RealServers)
	}
	Sort(vss)
	var b strings.Builder
	_ = WriteSave(&b, vss)
	return b.String()
}
