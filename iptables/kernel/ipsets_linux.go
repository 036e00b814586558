package kernel

// This file is the proxy's own ipset netlink client. vishvananda/netlink
// v1.3.1 has ipset calls (IpsetCreate, IpsetAdd, IpsetDel, IpsetListAll, ...)
// and we use its message types and constants, but three things it lacks are
// needed on the sync path, so this file builds those messages itself on
// github.com/vishvananda/netlink/nl:
//
//   - Batched add/del: netlink's IpsetAdd sends one message and waits for one
//     ACK per entry. `ipset restore` packs many entries of one set into one
//     IPSET_CMD_ADD message (nested IPSET_ATTR_ADT holding one IPSET_ATTR_DATA
//     per entry); the kernel applies them in order. addDel does the same.
//   - A quiet, complete dump: IpsetListAll returns one result per netlink
//     message (a large set spans many), parses attributes through a goroutine
//     and channel per call, and log.Printf's every attribute it does not know
//     (bucketsize, initval on kernels >= 5.11), i.e. on every full resync.
//   - bitmap:port entries without IPSET_ATTR_PROTO (netlink adds tcp to any
//     entry with a port).
//
// Create, destroy, flush and swap are built here too so that every request goes
// through one socket, opened in the network namespace of the caller of
// OpenSets, and every error maps to the same sentinel errors.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

const (
	nlaTypeMask = 0x3fff // clears NLA_F_NESTED and NLA_F_NET_BYTEORDER

	// batchBytes bounds the entries of one batched add/del message. They sit
	// in one nested IPSET_ATTR_ADT, whose length is a u16: past 64 KiB the
	// kernel answers EINVAL. 32 KiB holds about 400 hash:ip,port,ip entries.
	batchBytes = 32 << 10
)

// Sets speaks ipset netlink on one socket bound to the network
// namespace it was opened in.
type Sets struct {
	sock *nl.NetlinkSocket
	seq  atomic.Uint32
}

// OpenSets opens an ipset netlink socket (NETLINK_NETFILTER) in the calling
// thread's network namespace.
func OpenSets() (*Sets, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open ipset netlink socket: %w", err)
	}
	// The dump of a large set runs to many messages; a larger receive buffer
	// avoids ENOBUFS under load. Best effort: unprivileged tests may not raise it.
	_ = s.SetReceiveBufferSize(4<<20, true)
	return &Sets{sock: s}, nil
}

// Close closes the socket.
func (n *Sets) Close() { n.sock.Close() }

func (n *Sets) request(cmd int, flags int) *nl.NetlinkRequest {
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{
			Len:   uint32(unix.SizeofNlMsghdr),
			Type:  uint16(cmd | unix.NFNL_SUBSYS_IPSET<<8),
			Flags: unix.NLM_F_REQUEST | uint16(flags),
		},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: {Socket: n.sock, Seq: n.seq.Add(1) << 8}},
	}
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	return req
}

func (n *Sets) exec(req *nl.NetlinkRequest) ([][]byte, error) {
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	return msgs, ipsetErr(err)
}

// ipsetErr maps kernel ipset errnos to the package's sentinel errors,
// keeping the kernel's text.
func ipsetErr(err error) error {
	var errno syscall.Errno
	if err == nil || !errors.As(err, &errno) {
		return err
	}
	switch {
	case errno == unix.ENOENT:
		return fmt.Errorf("%w: %w", iptables.ErrSetNotFound, err)
	case errno == unix.EEXIST:
		return fmt.Errorf("%w: %w", iptables.ErrSetExists, err)
	case int(errno) == nl.IPSET_ERR_REFERENCED, int(errno) == nl.IPSET_ERR_BUSY, errno == unix.EBUSY:
		// ip_set_destroy answers IPSET_ERR_BUSY for a set a rule holds.
		return fmt.Errorf("%w: %s", iptables.ErrSetReferenced, nl.IPSetError(uintptr(errno)).Error())
	case int(errno) == nl.IPSET_ERR_TYPE_SPECIFIC:
		// The first type-specific code: IPSET_ERR_HASH_FULL for hash
		// types, IPSET_ERR_BITMAP_RANGE for bitmaps.
		return fmt.Errorf("%w: hash set full (maxelem reached) or bitmap entry out of range (errno %d)", iptables.ErrKernel, int(errno))
	case int(errno) >= nl.IPSET_ERR_PRIVATE:
		return fmt.Errorf("%w: %s (errno %d)", iptables.ErrKernel, nl.IPSetError(uintptr(errno)).Error(), int(errno))
	}
	return fmt.Errorf("%w: %w", iptables.ErrKernel, err)
}

func familyNumber(f string) uint8 {
	if f == "inet6" {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// revision is the lowest revision of each type that has every feature we use
// (plain entries, no counters, no comments); the kernel accepts any revision
// it knows.
func revision(typ string) uint8 {
	switch typ {
	case "hash:ip,port,net":
		return 2 // nomatch-free, as netlink's own default
	case "hash:ip,port", "hash:ip,port,ip", "hash:ip":
		return 1
	}
	return 0
}

// Create is `ipset create NAME TYPE family F hashsize 1024 maxelem MAXELEM`
// (or `range 0-65535` for bitmap:port, which ignores maxElem), with no
// extension: kube-proxy's create arguments. An existing set of that name is
// an error wrapping ErrSetExists.
func (n *Sets) Create(s iptables.IPSet, maxElem uint32) error {
	req := n.request(nl.IPSET_CMD_CREATE, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(s.Name)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_TYPENAME, nl.ZeroTerminated(s.Type)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_REVISION, nl.Uint8Attr(revision(s.Type))))
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	family := familyNumber(s.Family)
	if s.Type == "bitmap:port" {
		family = unix.AF_UNSPEC
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT_FROM|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint16Attr(iptables.BitmapPortFrom)))
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT_TO|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint16Attr(iptables.BitmapPortTo)))
	} else {
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_HASHSIZE|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint32Attr(iptables.HashSize)))
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_MAXELEM|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint32Attr(maxElem)))
	}
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FAMILY, nl.Uint8Attr(family)))
	req.AddData(data)
	if _, err := n.exec(req); err != nil {
		return fmt.Errorf("ipset create %s %s: %w", s.Name, s.Type, err)
	}
	return nil
}

// Swap is `ipset swap FROM TO` (IPSET_CMD_SWAP, as vishvananda/netlink's
// IpsetSwap builds it): the two sets exchange names, contents and the
// references of iptables rules, which hold a set by its index, so rules
// matching TO match FROM's former contents from then on, with no window.
// The kernel refuses sets of other type features or family
// (IPSET_ERR_TYPE_MISMATCH), and a set being dumped (EBUSY).
func (n *Sets) Swap(from, to string) error {
	req := n.request(nl.IPSET_CMD_SWAP, unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(from)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME2, nl.ZeroTerminated(to)))
	if _, err := n.exec(req); err != nil {
		return fmt.Errorf("ipset swap %s %s: %w", from, to, err)
	}
	return nil
}

// Destroy is `ipset destroy NAME`.
func (n *Sets) Destroy(name string) error {
	req := n.request(nl.IPSET_CMD_DESTROY, unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	if _, err := n.exec(req); err != nil {
		return fmt.Errorf("ipset destroy %s: %w", name, err)
	}
	return nil
}

// Flush is `ipset flush NAME`.
func (n *Sets) Flush(name string) error {
	req := n.request(nl.IPSET_CMD_FLUSH, unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	if _, err := n.exec(req); err != nil {
		return fmt.Errorf("ipset flush %s: %w", name, err)
	}
	return nil
}

// Add is `ipset add -exist NAME ENTRY` for every entry, packed into as few
// messages as fit. On failure it returns the first error; entries before the
// failing one are in the kernel, so callers retry entry by entry to learn
// which ones fail.
func (n *Sets) Add(s iptables.IPSet, entries []iptables.Entry) error {
	return n.addDel(nl.IPSET_CMD_ADD, s, entries)
}

// Del is `ipset del -exist NAME ENTRY` for every entry (missing entries are
// no error), batched like Add.
func (n *Sets) Del(s iptables.IPSet, entries []iptables.Entry) error {
	return n.addDel(nl.IPSET_CMD_DEL, s, entries)
}

func (n *Sets) addDel(cmd int, s iptables.IPSet, entries []iptables.Entry) error {
	verb := "add"
	if cmd == nl.IPSET_CMD_DEL {
		verb = "del"
	}
	for len(entries) > 0 {
		// No NLM_F_EXCL: adding an existing or deleting a missing entry is no
		// error, as with `ipset -exist`.
		req := n.request(cmd, unix.NLM_F_ACK)
		req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(s.Name)))
		adt := nl.NewRtAttr(nl.IPSET_ATTR_ADT|int(nl.NLA_F_NESTED), nil)
		size := 0
		i := 0
		for ; i < len(entries) && size < batchBytes; i++ {
			d, err := entryAttr(s, entries[i])
			if err != nil {
				return fmt.Errorf("ipset %s %s %s: %w", verb, s.Name, iptables.AppendEntry(nil, s.Type, entries[i]), err)
			}
			// The kernel reports a failing entry by its line number.
			d.AddChild(&nl.Uint32Attribute{Type: nl.IPSET_ATTR_LINENO | nl.NLA_F_NET_BYTEORDER, Value: uint32(i + 1)})
			adt.AddChild(d)
			size += d.Len()
		}
		req.AddData(adt)
		// IPSET_ATTR_ADT is only accepted with a top-level IPSET_ATTR_LINENO,
		// as `ipset restore` sends it.
		req.AddData(&nl.Uint32Attribute{Type: nl.IPSET_ATTR_LINENO, Value: 0})
		if _, err := n.exec(req); err != nil {
			if i == 1 {
				return fmt.Errorf("ipset %s %s %s: %w", verb, s.Name, iptables.AppendEntry(nil, s.Type, entries[0]), err)
			}
			return fmt.Errorf("ipset %s %s (batch of %d): %w", verb, s.Name, i, err)
		}
		entries = entries[i:]
	}
	return nil
}

// Test is `ipset test NAME ENTRY`: whether set s holds e, one request
// whatever the set's size.
func (n *Sets) Test(s iptables.IPSet, e iptables.Entry) (bool, error) {
	d, err := entryAttr(s, e)
	if err != nil {
		return false, fmt.Errorf("ipset test %s %s: %w", s.Name, iptables.AppendEntry(nil, s.Type, e), err)
	}
	req := n.request(nl.IPSET_CMD_TEST, unix.NLM_F_ACK)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(s.Name)))
	req.AddData(d)
	_, err = req.Execute(unix.NETLINK_NETFILTER, 0)
	// The kernel answers a member with 0 and a non-member with
	// IPSET_ERR_EXIST (ip_set_utest).
	var errno syscall.Errno
	if errors.As(err, &errno) && int(errno) == nl.IPSET_ERR_EXIST {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ipset test %s %s: %w", s.Name, iptables.AppendEntry(nil, s.Type, e), ipsetErr(err))
	}
	return true, nil
}

func addrAttr(attr int, a netip.Addr) *nl.RtAttr {
	typ := nl.IPSET_ATTR_IPADDR_IPV4
	if a.Is6() && !a.Is4In6() {
		typ = nl.IPSET_ATTR_IPADDR_IPV6
	}
	b := a.Unmap().AsSlice()
	nested := nl.NewRtAttr(attr|int(nl.NLA_F_NESTED), nil)
	nested.AddChild(nl.NewRtAttr(typ|int(nl.NLA_F_NET_BYTEORDER), b))
	return nested
}

func protoNumber(p model.Protocol) (uint8, error) {
	switch p {
	case model.TCP:
		return unix.IPPROTO_TCP, nil
	case model.UDP:
		return unix.IPPROTO_UDP, nil
	case model.SCTP:
		return unix.IPPROTO_SCTP, nil
	}
	return 0, fmt.Errorf("%w: protocol %q", iptables.ErrInvalidEntry, p)
}

func protoName(n uint8) model.Protocol {
	switch n {
	case unix.IPPROTO_TCP:
		return model.TCP
	case unix.IPPROTO_UDP:
		return model.UDP
	case unix.IPPROTO_SCTP:
		return model.SCTP
	}
	return model.Protocol(fmt.Sprint(n))
}

// entryAttr is one IPSET_ATTR_DATA for entry e of set s.
func entryAttr(s iptables.IPSet, e iptables.Entry) (*nl.RtAttr, error) {
	if err := iptables.CheckEntry(s, e); err != nil {
		return nil, err
	}
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	if s.Type == iptables.TypeBitmapPort {
		data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint16Attr(e.Port)))
		return data, nil
	}
	data.AddChild(addrAttr(nl.IPSET_ATTR_IP, e.IP))
	if s.Type == iptables.TypeHashIP {
		return data, nil
	}
	proto, err := protoNumber(e.Protocol)
	if err != nil {
		return nil, err
	}
	data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PORT|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint16Attr(e.Port)))
	data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_PROTO, nl.Uint8Attr(proto)))
	switch s.Type {
	case iptables.TypeHashIPPortIP, iptables.TypeHashIPPortNet:
		data.AddChild(addrAttr(nl.IPSET_ATTR_IP2, e.Net.Addr()))
		if s.Type == iptables.TypeHashIPPortNet {
			data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_CIDR2, nl.Uint8Attr(uint8(e.Net.Bits()))))
		}
	}
	return data, nil
}

// ListAll is `ipset save`: every set in the namespace with its entries, in
// one dump. Sets spanning several messages are merged.
func (n *Sets) ListAll() (map[string]*iptables.KernelSet, error) {
	return n.WalkAll(func(*iptables.KernelSet, iptables.Entry) bool { return true })
}

// WalkAll implements iptables.SetWalker: the dump of ListAll, each entry
// handed to keep as it is parsed and kept in its set only when keep says
// so.
func (n *Sets) WalkAll(keep func(ks *iptables.KernelSet, e iptables.Entry) bool) (map[string]*iptables.KernelSet, error) {
	req := n.request(nl.IPSET_CMD_LIST, unix.NLM_F_ACK|unix.NLM_F_DUMP)
	return n.list(req, keep)
}

// List implements iptables.SetWalker: `ipset list NAME`, the dump of one
// set; ErrSetNotFound when there is none.
func (n *Sets) List(name string) (*iptables.KernelSet, error) {
	req := n.request(nl.IPSET_CMD_LIST, unix.NLM_F_ACK|unix.NLM_F_DUMP)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	sets, err := n.list(req, func(*iptables.KernelSet, iptables.Entry) bool { return true })
	if err != nil {
		return nil, err
	}
	if ks := sets[name]; ks != nil {
		return ks, nil
	}
	return nil, fmt.Errorf("ipset list %s: %w", name, iptables.ErrSetNotFound)
}

func (n *Sets) list(req *nl.NetlinkRequest, keep func(*iptables.KernelSet, iptables.Entry) bool) (map[string]*iptables.KernelSet, error) {
	sets := map[string]*iptables.KernelSet{}
	err := req.ExecuteIter(unix.NETLINK_NETFILTER, 0, func(msg []byte) bool {
		parseSetMessage(msg, sets, keep)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("ipset list: %w", ipsetErr(err))
	}
	return sets, nil
}

type attr struct {
	typ   uint16
	value []byte
}

// attrs splits a netlink attribute stream; malformed tails are dropped.
func attrs(b []byte) []attr {
	var out []attr
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		if l < 4 || l > len(b) {
			break
		}
		out = append(out, attr{typ: binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask, value: b[4:l]})
		al := (l + 3) &^ 3
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return out
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// parseSetMessage merges one message of a list dump into sets, its
// entries kept where keep says so.
func parseSetMessage(msg []byte, sets map[string]*iptables.KernelSet, keep func(*iptables.KernelSet, iptables.Entry) bool) {
	if len(msg) < 4 {
		return
	}
	top := attrs(msg[4:])
	var name string
	for _, a := range top {
		if a.typ == nl.IPSET_ATTR_SETNAME {
			name = cstring(a.value)
		}
	}
	if name == "" {
		return
	}
	s := sets[name]
	if s == nil {
		s = &iptables.KernelSet{Name: name}
		sets[name] = s
	}
	for _, a := range top {
		switch a.typ {
		case nl.IPSET_ATTR_TYPENAME:
			s.Type = cstring(a.value)
		case nl.IPSET_ATTR_FAMILY:
			if len(a.value) > 0 {
				switch a.value[0] {
				case unix.AF_INET:
					s.Family = "inet"
				case unix.AF_INET6:
					s.Family = "inet6"
				}
			}
		case nl.IPSET_ATTR_DATA:
			for _, d := range attrs(a.value) {
				switch d.typ {
				case nl.IPSET_ATTR_PORT_FROM:
					s.PortFrom = binary.BigEndian.Uint16(d.value)
				case nl.IPSET_ATTR_PORT_TO:
					s.PortTo = binary.BigEndian.Uint16(d.value)
				case nl.IPSET_ATTR_MAXELEM:
					s.MaxElem = be32(d.value)
				case nl.IPSET_ATTR_TIMEOUT:
					s.Timeout = be32(d.value)
				case nl.IPSET_ATTR_CADT_FLAGS:
					s.CadtFlags = be32(d.value)
				case nl.IPSET_ATTR_NETMASK:
					if len(d.value) > 0 {
						s.Netmask = d.value[0]
					}
				case nl.IPSET_ATTR_REFERENCES:
					s.References = be32(d.value)
				}
			}
		case nl.IPSET_ATTR_ADT:
			for _, d := range attrs(a.value) {
				if d.typ == nl.IPSET_ATTR_DATA {
					if e := parseEntry(s.Type, d.value); keep(s, e) {
						s.Entries = append(s.Entries, e)
					}
				}
			}
		}
	}
}

// be32 is a big-endian u32 attribute value; 0 when it is too short.
func be32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func parseAddr(b []byte) netip.Addr {
	for _, a := range attrs(b) {
		if ip, ok := netip.AddrFromSlice(a.value); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

func parseEntry(typ string, b []byte) iptables.Entry {
	var e iptables.Entry
	var ip2 netip.Addr
	cidr2 := -1
	for _, a := range attrs(b) {
		switch a.typ {
		case nl.IPSET_ATTR_IP:
			e.IP = parseAddr(a.value)
		case nl.IPSET_ATTR_IP2:
			ip2 = parseAddr(a.value)
		case nl.IPSET_ATTR_CIDR2:
			cidr2 = int(a.value[0])
		case nl.IPSET_ATTR_PORT:
			e.Port = binary.BigEndian.Uint16(a.value)
		case nl.IPSET_ATTR_PROTO:
			e.Protocol = protoName(a.value[0])
		}
	}
	if ip2.IsValid() {
		if cidr2 < 0 {
			cidr2 = ip2.BitLen()
		}
		e.Net = netip.PrefixFrom(ip2, cidr2)
	}
	return iptables.Canonical(typ, e)
}
