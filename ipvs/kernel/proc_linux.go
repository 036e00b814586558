package kernel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The kernel's text listing of the IPVS table, /proc/net/ip_vs:
//
//	TCP  0A60000A:0050 rr
//	  -> 0AF40105:1F90      Masq    1      0          0
//	UDP  [fd00:0000:...:000a]:0035 rr persistent 10800 FFFFFFFF
//	  -> [fd00:...:0005]:0035      Masq    1      0          0
//
// At 10,000 virtual servers × 10 real servers it is 110,000 lines, read at
// every full sync: it is scanned without a string per line or field, and
// streamed (walkProcListing): one virtual server's real servers at a time.

// errProcLine is wrapped by every malformed line's error.
var errProcLine = errors.New("malformed line")

// scanProcIPVS reads the listing: service is called for each virtual
// server line (TCP, UDP, SCTP), dest for each real server line under one.
// Firewall-mark services (FWM), their real servers and header lines are
// skipped.
func scanProcIPVS(r io.Reader, service func(ipvs.Key), dest func(ipvs.RealServerStatus)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024)
	inService := false
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("  -> ")); ok {
			if !inService {
				continue
			}
			var f [5][]byte
			if fields(rest, f[:]) < 5 || string(f[0]) == "RemoteAddress:Port" {
				continue
			}
			ap, err := parseProcAddrPort(f[0])
			w, ok1 := atoi(f[2])
			act, ok2 := atoi(f[3])
			inact, ok3 := atoi(f[4])
			if err != nil || !ok1 || !ok2 || !ok3 {
				return fmt.Errorf("parse %s line %q: %w", procIPVS, line, errors.Join(errProcLine, err))
			}
			dest(ipvs.RealServerStatus{
				RealServer:    ipvs.RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: int32(w)},
				ActiveConns:   act,
				InactiveConns: inact,
			})
			continue
		}
		inService = false
		var f [2][]byte
		if fields(line, f[:]) < 2 {
			continue
		}
		var proto model.Protocol
		switch string(f[0]) {
		case "TCP":
			proto = model.TCP
		case "UDP":
			proto = model.UDP
		case "SCTP":
			proto = model.SCTP
		default:
			continue // header lines, FWM and protocols the proxy never uses
		}
		ap, err := parseProcAddrPort(f[1])
		if err != nil {
			return fmt.Errorf("parse %s line %q: %w", procIPVS, line, err)
		}
		inService = true
		service(ipvs.Key{Protocol: proto, Address: ap.Addr(), Port: ap.Port()})
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", procIPVS, err)
	}
	return nil
}

// parseProcIPVS parses the listing with the real servers' connection
// counters, for the graceful-termination queue (AllRealServers). A record
// listed twice (a resumed read) counts once.
func parseProcIPVS(r io.Reader) (map[ipvs.Key][]ipvs.RealServerStatus, error) {
	out := make(map[ipvs.Key][]ipvs.RealServerStatus)
	var cur ipvs.Key
	err := scanProcIPVS(r, func(k ipvs.Key) {
		cur = k
		out[k] = nil
	}, func(rs ipvs.RealServerStatus) {
		out[cur] = append(out[cur], rs)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// dumpedVS is a virtual server of the netlink dump without its real
// servers, kept in 120 bytes rather than a VirtualServer's 152 while the
// listing is read, with its counters, and whether the listing gave it to
// the walk yet.
type dumpedVS struct {
	key       ipvs.Key
	scheduler string
	flags     ipvs.Flags
	timeout   uint32
	listed    bool
	counters  ipvs.Counters
}

func dumpedOf(vs ipvs.VirtualServer, c ipvs.Counters) dumpedVS {
	return dumpedVS{key: vs.Key, scheduler: vs.Scheduler, flags: vs.Flags, timeout: vs.PersistenceTimeout, counters: c}
}

// virtualServer is d with rs as its real servers.
func (d *dumpedVS) virtualServer(rs []ipvs.RealServer) ipvs.VirtualServer {
	return ipvs.VirtualServer{Key: d.key, Scheduler: d.scheduler, Flags: d.flags, PersistenceTimeout: d.timeout, RealServers: rs}
}

// walkFunc is what a walk of the table calls for each virtual server: its
// real servers at their weights, its counters, and each real server's
// connections in the same order (ipvs.StatsWalker).
type walkFunc func(vs *ipvs.VirtualServer, c *ipvs.Counters, conns []ipvs.Conns)

// walkProcListing streams the listing: for every virtual server of dumped
// (sorted by key: CompareKeys) that it lists, it calls fn with the dumped
// attributes and counters and the listed real servers at their weights
// with their connections, in buffers reused for the next, and marks it
// listed. A virtual server listed twice (a resumed read) is given once, at
// its first listing; one the dump lacks (created since) is skipped. On a
// malformed line it returns the error and leaves the virtual server it
// was reading unlisted.
func walkProcListing(r io.Reader, dumped []dumpedVS, fn walkFunc) error {
	var cur *dumpedVS
	var buf []ipvs.RealServer
	var conns []ipvs.Conns
	var vs ipvs.VirtualServer // one for all: fn's argument escapes
	flush := func() {
		if cur != nil {
			vs = cur.virtualServer(buf)
			fn(&vs, &cur.counters, conns)
			cur = nil
		}
	}
	err := scanProcIPVS(r, func(k ipvs.Key) {
		flush()
		buf, conns = buf[:0], conns[:0]
		if i, ok := slices.BinarySearchFunc(dumped, k, func(d dumpedVS, k ipvs.Key) int { return ipvs.CompareKeys(d.key, k) }); ok && !dumped[i].listed {
			cur = &dumped[i]
			cur.listed = true
		}
	}, func(rs ipvs.RealServerStatus) {
		if cur != nil {
			buf = append(buf, rs.RealServer)
			conns = append(conns, ipvs.Conns{Active: uint64(rs.ActiveConns), Inactive: uint64(rs.InactiveConns)})
		}
	})
	if err != nil {
		if cur != nil {
			cur.listed = false
		}
		return err
	}
	flush()
	return nil
}

// fields splits b at runs of spaces into out, as many as fit, and returns
// how many it found.
func fields(b []byte, out [][]byte) int {
	n := 0
	for n < len(out) {
		b = bytes.TrimLeft(b, " \t")
		if len(b) == 0 {
			break
		}
		end := bytes.IndexAny(b, " \t")
		if end < 0 {
			end = len(b)
		}
		out[n], b = b[:end], b[end:]
		n++
	}
	return n
}

// atoi parses a non-negative decimal number.
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// hex parses a hexadecimal number of at most bits bits.
func hex(b []byte, bits int) (uint64, bool) {
	if len(b) == 0 || len(b)*4 > bits {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}

// parseProcAddrPort parses "0A60000A:0050" (IPv4 as big-endian hex) or
// "[fd00:0000:0000:0000:0000:0000:0000:000a]:0035"; the port is hex.
func parseProcAddrPort(s []byte) (netip.AddrPort, error) {
	i := bytes.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("%w: no port in %q", errProcLine, s)
	}
	port, ok := hex(s[i+1:], 16)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%w: port in %q", errProcLine, s)
	}
	host := s[:i]
	var addr netip.Addr
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		var err error
		if addr, err = netip.ParseAddr(string(host[1 : len(host)-1])); err != nil {
			return netip.AddrPort{}, fmt.Errorf("%w: %w", errProcLine, err)
		}
	} else {
		v, ok := hex(host, 32)
		if !ok || len(host) != 8 {
			return netip.AddrPort{}, fmt.Errorf("%w: IPv4 address in %q", errProcLine, s)
		}
		addr = netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}
