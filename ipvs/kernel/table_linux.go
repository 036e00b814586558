package kernel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"

	mobyipvs "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// procIPVS is the kernel's text listing of the IPVS table of the calling
// thread's network namespace (/proc/net/ip_vs would follow the main thread's).
const procIPVS = "/proc/thread-self/net/ip_vs"

// Table is the IPVS table of the network namespace it was opened in, over
// generic netlink sockets: github.com/moby/ipvs's, where each call is one
// request and its acknowledgement, and a batch writer's
// (internal/edge/nlconn), where AddServices and AddRealServers send many
// requests to a sendmsg.
//
// EachService (and Services over it) reads the table with one netlink dump
// of the virtual servers, on a second socket of the same namespace and
// parsed as it arrives (dumper), plus one read of
// /proc/thread-self/net/ip_vs for all real servers, streamed: IPVS
// netlink has no "all destinations" dump (IPVS_CMD_GET_DEST needs a
// service), so moby's GetDestinations would cost one dump per service.
// When the /proc listing is unavailable, or lacks a service the netlink
// dump has (the kernel's iterator skips services when other network
// namespaces hold IPVS services and the listing spans several reads), it
// falls back to that per-service dump for those services only.
type Table struct {
	h *mobyipvs.Handle
	// dump is the socket Services dumps the virtual servers on, one
	// message at a time (dumper).
	dump *dumper
	// batch is the socket AddRealServers sends its requests on, many to
	// a sendmsg.
	batch *nlconn.Writer
	// procPath is procIPVS; tests point it at a file.
	procPath string
	// lastDumped is how many virtual servers the last dump held: the
	// next one's slice is sized from it.
	lastDumped int
}

var (
	_ ipvs.Table       = (*Table)(nil)
	_ ipvs.Walker      = (*Table)(nil)
	_ ipvs.StatsWalker = (*Table)(nil)
)

// Open opens the IPVS table of the calling thread's network
// namespace (moby/ipvs New("")); it loads ip_vs through modprobe if needed.
// Call it on the thread, locked, that is in the target namespace.
func Open() (*Table, error) {
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("open IPVS netlink socket: %w", err)
	}
	d, err := openDumper()
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("open IPVS netlink socket: %w", err)
	}
	w, err := nlconn.OpenWriter(unix.NETLINK_GENERIC)
	if err != nil {
		h.Close()
		d.close()
		return nil, fmt.Errorf("open IPVS netlink socket: %w", err)
	}
	return &Table{h: h, dump: d, batch: w, procPath: procIPVS}, nil
}

// Close closes the netlink sockets.
func (k *Table) Close() {
	k.h.Close()
	k.dump.close()
	k.batch.Close()
}

// SetTimeouts is `ipvsadm --set TCP TCPFIN UDP`; a zero duration leaves
// that timeout as it is, and all three zero does nothing.
func (k *Table) SetTimeouts(tcp, tcpFin, udp time.Duration) error {
	if tcp == 0 && tcpFin == 0 && udp == 0 {
		return nil
	}
	if err := k.h.SetConfig(&mobyipvs.Config{TimeoutTCP: tcp, TimeoutTCPFin: tcpFin, TimeoutUDP: udp}); err != nil {
		return fmt.Errorf("ipvsadm --set %s %s %s: %w", tcp, tcpFin, udp, err)
	}
	return nil
}

// Timeouts reads the IPVS timeouts: `ipvsadm -L --timeout`.
func (k *Table) Timeouts() (tcp, tcpFin, udp time.Duration, err error) {
	c, err := k.h.GetConfig()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ipvsadm -L --timeout: %w", err)
	}
	return c.TimeoutTCP, c.TimeoutTCPFin, c.TimeoutUDP, nil
}

// Services implements Table: EachService, every virtual server with a
// real-server list of its own.
func (k *Table) Services() ([]ipvs.VirtualServer, error) {
	out := make([]ipvs.VirtualServer, 0, k.lastDumped+k.lastDumped/8)
	err := k.EachService(func(vs *ipvs.VirtualServer) {
		c := *vs
		c.RealServers = nil
		if len(vs.RealServers) > 0 {
			c.RealServers = slices.Clone(vs.RealServers)
		}
		out = append(out, c)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachService implements ipvs.Walker: one virtual server dump, then one
// read of the /proc listing for every real server, streamed, so that no
// more than one virtual server's real servers are held at a time; a
// service missing from the listing (see below) costs one
// IPVS_CMD_GET_DEST dump of its own.
func (k *Table) EachService(fn func(vs *ipvs.VirtualServer)) error {
	return k.each(func(vs *ipvs.VirtualServer, _ *ipvs.Counters, _ []ipvs.Conns) { fn(vs) })
}

// EachServiceStats implements ipvs.StatsWalker with the same reads as
// EachService: the virtual servers' dump carries their counters, the
// /proc listing each real server's connections.
func (k *Table) EachServiceStats(fn func(vs *ipvs.VirtualServer, c *ipvs.Counters, conns []ipvs.Conns)) error {
	return k.each(fn)
}

func (k *Table) each(fn walkFunc) error {
	dumped := make([]dumpedVS, 0, k.lastDumped+k.lastDumped/8)
	if err := k.dump.servicesCounted(func(vs ipvs.VirtualServer, c ipvs.Counters) { dumped = append(dumped, dumpedOf(vs, c)) }); err != nil {
		return fmt.Errorf("dump IPVS virtual servers: %w", err)
	}
	k.lastDumped = len(dumped)
	// Sorted for the walk's lookups: an index map of 10,000 keys would
	// be one more megabyte held while the listing streams.
	slices.SortFunc(dumped, func(a, b dumpedVS) int { return ipvs.CompareKeys(a.key, b.key) })
	if f, err := os.Open(k.procPath); err == nil {
		// A listing that fails part way leaves the rest to the fallback.
		_ = walkProcListing(bufio.NewReaderSize(f, procReadSize), dumped, fn)
		f.Close()
	}
	for i := range dumped {
		if dumped[i].listed {
			continue
		}
		// Not in the listing: the kernel's /proc iterator loses whole
		// services when other network namespaces have IPVS services (it
		// resumes each read(2) at a position counted over all namespaces
		// but seeks it over this one's only), so a service the netlink
		// dump has and the listing lacks is asked for.
		vs := dumped[i].virtualServer(nil)
		ds, err := k.h.GetDestinations(toService(vs))
		if err != nil {
			return fmt.Errorf("dump real servers of %s: %w", vs.Key, err)
		}
		conns := make([]ipvs.Conns, 0, len(ds))
		for _, d := range ds {
			st := fromDestination(d)
			vs.RealServers = append(vs.RealServers, st.RealServer)
			conns = append(conns, ipvs.Conns{Active: uint64(st.ActiveConns), Inactive: uint64(st.InactiveConns)})
		}
		fn(&vs, &dumped[i].counters, conns)
	}
	return nil
}

// procReadSize is the size of each read(2) of the /proc listing. The
// kernel walks the service hash from its start to the read's position at
// every read (ip_vs_info_seq_start), so small reads cost a walk each; at
// 256 KiB a listing of 10,000 × 10 (5.6 MB) takes 22 of them. Each resumed
// read may also lose services when another namespace holds IPVS services
// (EachService asks for those one by one), so the size trades the read's
// buffer, held while it streams, against those round trips on such hosts.
const procReadSize = 256 << 10

// readProc parses the whole /proc listing with parse, read procReadSize
// at a time.
func readProc[T any](path string, parse func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	return parse(bufio.NewReaderSize(f, procReadSize))
}

// AllRealServers implements CounterReader with one read of the /proc listing.
func (k *Table) AllRealServers() (map[ipvs.Key][]ipvs.RealServerStatus, error) {
	m, err := readProc(k.procPath, parseProcIPVS)
	if err != nil {
		return nil, fmt.Errorf("ipvsadm -L -n: %w", err)
	}
	return m, nil
}

var _ ipvs.CounterReader = (*Table)(nil)

// RealServers implements Table with one IPVS_CMD_GET_DEST dump.
func (k *Table) RealServers(key ipvs.Key) ([]ipvs.RealServerStatus, error) {
	ds, err := k.h.GetDestinations(toService(ipvs.VirtualServer{Key: key}))
	if err != nil {
		return nil, fmt.Errorf("ipvsadm -L -n %s: %w", key, mapErrno(err))
	}
	out := make([]ipvs.RealServerStatus, 0, len(ds))
	for _, d := range ds {
		out = append(out, fromDestination(d))
	}
	return out, nil
}

// Service is one virtual server with its real servers: an
// IPVS_CMD_GET_SERVICE for k, then its IPVS_CMD_GET_DEST dump (`ipvsadm
// -L -n -t VIP:PORT`), no walk of the table. It returns nil and no error
// when the kernel has no virtual server k.
func (k *Table) Service(key ipvs.Key) (*ipvs.VirtualServer, error) {
	s, err := k.h.GetService(toService(ipvs.VirtualServer{Key: key}))
	if err != nil {
		if err = mapErrno(err); errors.Is(err, ipvs.ErrNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("ipvsadm -L -n %s: %w", key, err)
	}
	vs := &ipvs.VirtualServer{Key: key, Scheduler: s.SchedName, Flags: ipvs.Flags(s.Flags) &^ ipvs.FlagHashed}
	if vs.Flags&ipvs.FlagPersistent != 0 {
		vs.PersistenceTimeout = s.Timeout
	}
	rss, err := k.RealServers(key)
	if err != nil {
		return nil, err
	}
	for _, rs := range rss {
		vs.RealServers = append(vs.RealServers, rs.RealServer)
	}
	return vs, nil
}

// AddService implements Table.
func (k *Table) AddService(vs ipvs.VirtualServer) error {
	if err := k.h.NewService(toService(vs)); err != nil {
		return fmt.Errorf("ipvsadm -A %s -s %s: %w", vs.Key, vs.Scheduler, mapErrno(err))
	}
	return nil
}

// AddServices implements Table: the requests go many to a sendmsg, each
// acknowledged on its own (internal/edge/nlconn).
func (k *Table) AddServices(vss []ipvs.VirtualServer, each func(i int, err error)) {
	k.batch.Do(len(vss), func(b []byte, i int, seq uint32) []byte {
		return appendNewService(b, k.dump.family, seq, vss[i])
	}, func(i int, err error) {
		if err != nil {
			err = fmt.Errorf("ipvsadm -A %s -s %s: %w", vss[i].Key, vss[i].Scheduler, mapErrno(err))
		}
		each(i, err)
	})
}

// UpdateService implements Table.
func (k *Table) UpdateService(vs ipvs.VirtualServer) error {
	if err := k.h.UpdateService(toService(vs)); err != nil {
		return fmt.Errorf("ipvsadm -E %s -s %s: %w", vs.Key, vs.Scheduler, mapErrno(err))
	}
	return nil
}

// DelService implements Table.
func (k *Table) DelService(key ipvs.Key) error {
	if err := k.h.DelService(toService(ipvs.VirtualServer{Key: key})); err != nil {
		return fmt.Errorf("ipvsadm -D %s: %w", key, mapErrno(err))
	}
	return nil
}

// AddRealServer implements Table.
func (k *Table) AddRealServer(key ipvs.Key, rs ipvs.RealServer) error {
	if err := k.h.NewDestination(toService(ipvs.VirtualServer{Key: key}), toDestination(rs)); err != nil {
		return fmt.Errorf("ipvsadm -a %s -r %s -m -w %d: %w", key, netip.AddrPortFrom(rs.Address, rs.Port), rs.Weight, mapErrno(err))
	}
	return nil
}

// AddRealServers implements Table: the requests go many to a sendmsg,
// each acknowledged on its own (internal/edge/nlconn).
func (k *Table) AddRealServers(key ipvs.Key, rss []ipvs.RealServer, each func(i int, err error)) {
	k.batch.Do(len(rss), func(b []byte, i int, seq uint32) []byte {
		return appendNewDest(b, k.dump.family, seq, key, rss[i])
	}, func(i int, err error) {
		if err != nil {
			rs := rss[i]
			err = fmt.Errorf("ipvsadm -a %s -r %s -m -w %d: %w", key, netip.AddrPortFrom(rs.Address, rs.Port), rs.Weight, mapErrno(err))
		}
		each(i, err)
	})
}

// UpdateRealServer implements Table.
func (k *Table) UpdateRealServer(key ipvs.Key, rs ipvs.RealServer) error {
	if err := k.h.UpdateDestination(toService(ipvs.VirtualServer{Key: key}), toDestination(rs)); err != nil {
		return fmt.Errorf("ipvsadm -e %s -r %s -m -w %d: %w", key, netip.AddrPortFrom(rs.Address, rs.Port), rs.Weight, mapErrno(err))
	}
	return nil
}

// DelRealServer implements Table.
func (k *Table) DelRealServer(key ipvs.Key, rs ipvs.RealServer) error {
	if err := k.h.DelDestination(toService(ipvs.VirtualServer{Key: key}), toDestination(rs)); err != nil {
		return fmt.Errorf("ipvsadm -d %s -r %s: %w", key, netip.AddrPortFrom(rs.Address, rs.Port), mapErrno(err))
	}
	return nil
}

// mapErrno adds the package's sentinel to a kernel errno.
func mapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.EEXIST:
			return fmt.Errorf("%w: %w", ipvs.ErrExists, err)
		case unix.ESRCH, unix.ENOENT:
			return fmt.Errorf("%w: %w", ipvs.ErrNotFound, err)
		}
	}
	return err
}

func protoNumber(p model.Protocol) uint16 {
	switch p {
	case model.UDP:
		return unix.IPPROTO_UDP
	case model.SCTP:
		return unix.IPPROTO_SCTP
	default:
		return unix.IPPROTO_TCP
	}
}

func protoFromNumber(n uint16) (model.Protocol, bool) {
	switch n {
	case unix.IPPROTO_TCP:
		return model.TCP, true
	case unix.IPPROTO_UDP:
		return model.UDP, true
	case unix.IPPROTO_SCTP:
		return model.SCTP, true
	}
	return "", false
}

// toService converts to moby's form. The netmask is always the full host
// mask (/32, /128), as kube-proxy sets it, so persistence is per client.
func toService(vs ipvs.VirtualServer) *mobyipvs.Service {
	s := &mobyipvs.Service{
		Address:   net.IP(vs.Address.AsSlice()),
		Protocol:  protoNumber(vs.Protocol),
		Port:      vs.Port,
		SchedName: vs.Scheduler,
		Flags:     uint32(vs.Flags &^ ipvs.FlagHashed),
		Timeout:   vs.PersistenceTimeout,
	}
	if vs.Address.Is4() {
		s.AddressFamily = unix.AF_INET
		s.Netmask = 0xffffffff
	} else {
		s.AddressFamily = unix.AF_INET6
		s.Netmask = 128
	}
	return s
}

func toDestination(rs ipvs.RealServer) *mobyipvs.Destination {
	d := &mobyipvs.Destination{
		Address:         net.IP(rs.Address.AsSlice()),
		Port:            rs.Port,
		Weight:          int(rs.Weight),
		ConnectionFlags: mobyipvs.ConnectionFlagMasq,
	}
	if rs.Address.Is4() {
		d.AddressFamily = unix.AF_INET
	} else {
		d.AddressFamily = unix.AF_INET6
	}
	return d
}

func fromDestination(d *mobyipvs.Destination) ipvs.RealServerStatus {
	addr, _ := netip.AddrFromSlice(d.Address)
	return ipvs.RealServerStatus{
		RealServer:    ipvs.RealServer{Address: addr.Unmap(), Port: d.Port, Weight: int32(d.Weight)},
		ActiveConns:   d.ActiveConnections,
		InactiveConns: d.InactiveConnections,
	}
}
