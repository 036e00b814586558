package kernel

// This file lists and deletes nftables tables over netfilter netlink
// (NFNL_SUBSYS_NFTABLES), as `nft list tables` and `nft delete table` do,
// so the proxy needs no `nft` binary to take a node over from kube-proxy's
// nftables mode. Which tables go is iptables.Syncer's decision
// (iptables/nftables.go); this file only speaks the protocol.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// nftFamilies are the nftables families by NFPROTO number, as nft names
// them.
var nftFamilies = map[uint8]string{
	unix.NFPROTO_INET: "inet", unix.NFPROTO_IPV4: "ip", unix.NFPROTO_ARP: "arp",
	unix.NFPROTO_NETDEV: "netdev", unix.NFPROTO_BRIDGE: "bridge", unix.NFPROTO_IPV6: "ip6",
}

// ErrNFTFamily: a table of a family nftables does not have.
var ErrNFTFamily = errors.New("unknown nftables family")

// NFTables speaks nftables netlink on one socket bound to the network
// namespace it was opened in.
type NFTables struct {
	sock *nl.NetlinkSocket
	seq  atomic.Uint32
}

// OpenNFTables opens a netfilter netlink socket in the calling thread's
// network namespace.
func OpenNFTables() (*NFTables, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	// A kernel that never answers must not hold the sync loop.
	if err := s.SetReceiveTimeout(&unix.Timeval{Sec: 10}); err != nil {
		s.Close()
		return nil, fmt.Errorf("nftables netlink socket: %w", err)
	}
	return &NFTables{sock: s}, nil
}

// Close closes the socket.
func (n *NFTables) Close() { n.sock.Close() }

var _ iptables.NFTablesKernel = (*NFTables)(nil)

// Tables is `nft list tables`: one NFT_MSG_GETTABLE dump of every family.
func (n *NFTables) Tables() ([]iptables.NFTable, error) {
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{Len: uint32(unix.SizeofNlMsghdr), Type: uint16(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETTABLE),
			Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: {Socket: n.sock, Seq: n.seq.Add(1) << 8}},
	}
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	var out []iptables.NFTable
	for _, m := range msgs {
		if len(m) < nl.SizeofNfgenmsg {
			return nil, fmt.Errorf("nft list tables: short message (%d bytes)", len(m))
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
		if err != nil {
			return nil, fmt.Errorf("nft list tables: %w", err)
		}
		t := iptables.NFTable{Family: nftFamilies[m[0]]}
		for _, a := range attrs {
			if a.Attr.Type&nlaTypeMask == unix.NFTA_TABLE_NAME {
				t.Name = string(trimNUL(a.Value))
			}
		}
		if t.Family == "" {
			t.Family = fmt.Sprintf("family-%d", m[0])
		}
		out = append(out, t)
	}
	return out, nil
}

// DeleteTables is `nft delete table FAMILY NAME` for each table in one
// batch (NFNL_MSG_BATCH_BEGIN ... END), which the kernel commits as one
// transaction: every table goes, or none.
func (n *NFTables) DeleteTables(tables []iptables.NFTable) error {
	return n.transact(unix.NFT_MSG_DELTABLE, 0, tables)
}

// transact sends one batch of table messages of type op (with flags
// beside NLM_F_REQUEST|NLM_F_ACK) and waits for the kernel's answer to
// each: one transaction.
func (n *NFTables) transact(op, flags uint16, tables []iptables.NFTable) error {
	verb := map[uint16]string{unix.NFT_MSG_DELTABLE: "delete", unix.NFT_MSG_NEWTABLE: "add"}[op]
	msgs := make([]nftMsg, 0, len(tables))
	fams := make([]uint8, 0, len(tables))
	for _, t := range tables {
		fam, ok := familyOf(t.Family)
		if !ok {
			return fmt.Errorf("nft %s %s: %w", verb, t, ErrNFTFamily)
		}
		msgs = append(msgs, nftMsg{op, flags, serial(str(unix.NFTA_TABLE_NAME, t.Name)), verb + " " + t.String()})
		fams = append(fams, fam)
	}
	return n.batch(msgs, fams)
}

// message is one netlink message of nfnetlink: header, nfgenmsg (family,
// version 0, res_id, big-endian) and attrs.
func message(typ, flags uint16, seq uint32, resID uint16, family uint8, attrs []byte) []byte {
	size := unix.SizeofNlMsghdr + nl.SizeofNfgenmsg + len(attrs)
	b := make([]byte, unix.SizeofNlMsghdr, size)
	ne := nl.NativeEndian()
	ne.PutUint32(b[0:4], uint32(size))
	ne.PutUint16(b[4:6], typ)
	ne.PutUint16(b[6:8], flags)
	ne.PutUint32(b[8:12], seq)
	b = append(b, family, nl.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, resID)
	return append(b, attrs...)
}

func familyOf(name string) (uint8, bool) {
	for n, f := range nftFamilies {
		if f == name {
			return n, true
		}
	}
	return 0, false
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
