package kernel

// This file reads and writes iptables.ARPTable, the table of
// --strict-arp-vips, over nftables netlink, as `nft list table arp
// ipvs-proxy` and `nft -f` would. What the table holds and when it is
// rebuilt is iptables.Syncer's decision (iptables/arp.go).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// Of linux/netfilter.h and linux/netfilter_arp.h, which x/sys/unix lacks.
const (
	nfDrop   = 0
	nfAccept = 1
	nfARPIn  = 0
	// nftIPv4Addr is nft's ipv4_addr datatype, for `nft list` to print
	// the set's elements as addresses.
	nftIPv4Addr = 7
	// udataComment is libnftnl's NFTNL_UDATA_RULE_COMMENT: a rule's
	// userdata as nft writes `comment "..."`.
	udataComment = 0
	// elemsPerMessage keeps one NEWSETELEM's nested list under netlink's
	// 64 KiB attribute length; messagesPerBatch keeps a batch under the
	// socket's default send buffer.
	elemsPerMessage  = 1024
	messagesPerBatch = 8
)

// arpRequest is what the rule matches at the start of the ARP header:
// hardware type Ethernet, protocol IPv4, address lengths 6 and 4, and
// operation request (RFC 826). The target protocol address follows the
// three addresses before it, at arpTargetOffset.
var arpRequest = []byte{0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01}

const arpTargetOffset = 8 + 6 + 4 + 6

var _ iptables.ARPKernel = (*NFTables)(nil)

// ReadARP reads iptables.ARPTable: its chains, sets and rules (three
// dumps) and its set's elements (one more).
func (n *NFTables) ReadARP() (iptables.ARPState, error) {
	var st iptables.ARPState
	tables, err := n.Tables()
	if err != nil {
		return st, err
	}
	if st.Present = slices.Contains(tables, iptables.ARPTable); !st.Present {
		return st, nil
	}
	table := nl.NewRtAttr(unix.NFTA_TABLE_NAME, nl.ZeroTerminated(iptables.ARPTable.Name)).Serialize()
	err = n.dumpARP(unix.NFT_MSG_GETCHAIN, table, func(a map[uint16][]byte) {
		if cstring(a[unix.NFTA_CHAIN_TABLE]) != iptables.ARPTable.Name {
			return
		}
		c := iptables.ARPChainState{Name: cstring(a[unix.NFTA_CHAIN_NAME]), Base: a[unix.NFTA_CHAIN_HOOK] != nil}
		c.AcceptPolicy = len(a[unix.NFTA_CHAIN_POLICY]) == 4 && be32(a[unix.NFTA_CHAIN_POLICY]) == nfAccept
		st.Chains = append(st.Chains, c)
	})
	if err == nil {
		err = n.dumpARP(unix.NFT_MSG_GETSET, table, func(a map[uint16][]byte) {
			if cstring(a[unix.NFTA_SET_TABLE]) == iptables.ARPTable.Name {
				st.Sets = append(st.Sets, cstring(a[unix.NFTA_SET_NAME]))
			}
		})
	}
	if err == nil {
		err = n.dumpARP(unix.NFT_MSG_GETRULE, table, func(a map[uint16][]byte) {
			if cstring(a[unix.NFTA_RULE_TABLE]) == iptables.ARPTable.Name {
				st.Rules = append(st.Rules, cstring(a[unix.NFTA_RULE_CHAIN])+": "+comment(a[unix.NFTA_RULE_USERDATA]))
			}
		})
	}
	if err == nil && slices.Contains(st.Sets, iptables.ARPSet) {
		err = n.dumpARP(unix.NFT_MSG_GETSETELEM, setAttrs(), func(a map[uint16][]byte) {
			st.VIPs = append(st.VIPs, elements(a[unix.NFTA_SET_ELEM_LIST_ELEMENTS])...)
		})
	}
	if err != nil {
		return iptables.ARPState{}, fmt.Errorf("nft list %s: %w", iptables.ARPTable, err)
	}
	slices.SortFunc(st.VIPs, netip.Addr.Compare)
	return st, nil
}

// dumpARP is one NLM_F_DUMP request of typ in the arp family, each
// message's attributes given to fn by type.
func (n *NFTables) dumpARP(typ uint16, attrs []byte, fn func(map[uint16][]byte)) error {
	req := &nl.NetlinkRequest{
		NlMsghdr: unix.NlMsghdr{Len: uint32(unix.SizeofNlMsghdr), Type: unix.NFNL_SUBSYS_NFTABLES<<8 | typ,
			Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP},
		Sockets: map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: {Socket: n.sock, Seq: n.seq.Add(1) << 8}},
	}
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.NFPROTO_ARP, Version: nl.NFNETLINK_V0})
	req.AddRawData(attrs)
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofNfgenmsg {
			return fmt.Errorf("short message (%d bytes)", len(m))
		}
		fn(attrMap(m[nl.SizeofNfgenmsg:]))
	}
	return nil
}

// BuildARP creates the table, its set with vips, its chain and its rule in
// one transaction, after deleting the table when replace is set. Elements
// past the first batch's follow in further transactions.
func (n *NFTables) BuildARP(replace bool, vips []netip.Addr) error {
	t := iptables.ARPTable
	var msgs []nftMsg
	if replace {
		msgs = append(msgs, nftMsg{unix.NFT_MSG_DELTABLE, 0, serial(str(unix.NFTA_TABLE_NAME, t.Name)), "delete " + t.String()})
	}
	const setID = 1
	msgs = append(msgs,
		nftMsg{unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, serial(str(unix.NFTA_TABLE_NAME, t.Name)), "add " + t.String()},
		nftMsg{unix.NFT_MSG_NEWSET, unix.NLM_F_CREATE, serial(
			str(unix.NFTA_SET_TABLE, t.Name), str(unix.NFTA_SET_NAME, iptables.ARPSet),
			u32(unix.NFTA_SET_FLAGS, 0), u32(unix.NFTA_SET_KEY_TYPE, nftIPv4Addr), u32(unix.NFTA_SET_KEY_LEN, 4),
			u32(unix.NFTA_SET_ID, setID)), "add set " + iptables.ARPSet},
		nftMsg{unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE, serial(
			str(unix.NFTA_CHAIN_TABLE, t.Name), str(unix.NFTA_CHAIN_NAME, iptables.ARPChain),
			nested(unix.NFTA_CHAIN_HOOK, u32(unix.NFTA_HOOK_HOOKNUM, nfARPIn), u32(unix.NFTA_HOOK_PRIORITY, 0)),
			u32(unix.NFTA_CHAIN_POLICY, nfAccept), str(unix.NFTA_CHAIN_TYPE, "filter")), "add chain " + iptables.ARPChain},
		nftMsg{unix.NFT_MSG_NEWRULE, unix.NLM_F_CREATE | unix.NLM_F_APPEND, serial(
			str(unix.NFTA_RULE_TABLE, t.Name), str(unix.NFTA_RULE_CHAIN, iptables.ARPChain),
			nested(unix.NFTA_RULE_EXPRESSIONS,
				payload(0, len(arpRequest)), cmpEq(arpRequest),
				payload(arpTargetOffset, 4), lookup(iptables.ARPSet, setID),
				verdict(nfDrop)),
			nl.NewRtAttr(unix.NFTA_RULE_USERDATA, udata(iptables.ARPRuleComment))), "add rule"},
	)
	elems := elemMsgs(unix.NFT_MSG_NEWSETELEM, unix.NLM_F_CREATE, vips)
	first := min(len(elems), messagesPerBatch)
	if err := n.commit(append(msgs, elems[:first]...)); err != nil {
		return err
	}
	return n.commitChunked(elems[first:])
}

// UpdateARP deletes del from and adds add to the table's set; each batch
// is one transaction.
func (n *NFTables) UpdateARP(add, del []netip.Addr) error {
	return n.commitChunked(append(elemMsgs(unix.NFT_MSG_DELSETELEM, 0, del), elemMsgs(unix.NFT_MSG_NEWSETELEM, unix.NLM_F_CREATE, add)...))
}

func (n *NFTables) commitChunked(msgs []nftMsg) error {
	for c := range slices.Chunk(msgs, messagesPerBatch) {
		if err := n.commit(c); err != nil {
			return err
		}
	}
	return nil
}

// elemMsgs are the messages of type op that add or delete vips.
func elemMsgs(op, flags uint16, vips []netip.Addr) []nftMsg {
	var out []nftMsg
	for c := range slices.Chunk(vips, elemsPerMessage) {
		list := nl.NewRtAttr(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_LIST_ELEMENTS, nil)
		for _, v := range c {
			key := nested(unix.NFTA_SET_ELEM_KEY, nl.NewRtAttr(unix.NFTA_DATA_VALUE, v.AsSlice()))
			list.AddChild(nested(unix.NFTA_LIST_ELEM, key))
		}
		verb := map[uint16]string{unix.NFT_MSG_NEWSETELEM: "add", unix.NFT_MSG_DELSETELEM: "delete"}[op]
		out = append(out, nftMsg{op, flags, append(setAttrs(), list.Serialize()...),
			fmt.Sprintf("%s %d elements of set %s", verb, len(c), iptables.ARPSet)})
	}
	return out
}

func setAttrs() []byte {
	return serial(str(unix.NFTA_SET_ELEM_LIST_TABLE, iptables.ARPTable.Name), str(unix.NFTA_SET_ELEM_LIST_SET, iptables.ARPSet))
}

// The rule's expressions, as nft compiles `arp ... daddr ip @vips drop`.

func expr(name string, data ...*nl.RtAttr) *nl.RtAttr {
	return nested(unix.NFTA_LIST_ELEM, str(unix.NFTA_EXPR_NAME, name), nested(unix.NFTA_EXPR_DATA, data...))
}

// payload loads length bytes of the ARP header at offset into register 1.
func payload(offset, length int) *nl.RtAttr {
	return expr("payload", u32(unix.NFTA_PAYLOAD_DREG, unix.NFT_REG_1), u32(unix.NFTA_PAYLOAD_BASE, unix.NFT_PAYLOAD_NETWORK_HEADER),
		u32(unix.NFTA_PAYLOAD_OFFSET, uint32(offset)), u32(unix.NFTA_PAYLOAD_LEN, uint32(length)))
}

func cmpEq(value []byte) *nl.RtAttr {
	return expr("cmp", u32(unix.NFTA_CMP_SREG, unix.NFT_REG_1), u32(unix.NFTA_CMP_OP, unix.NFT_CMP_EQ),
		nested(unix.NFTA_CMP_DATA, nl.NewRtAttr(unix.NFTA_DATA_VALUE, value)))
}

func lookup(set string, id uint32) *nl.RtAttr {
	return expr("lookup", str(unix.NFTA_LOOKUP_SET, set), u32(unix.NFTA_LOOKUP_SET_ID, id), u32(unix.NFTA_LOOKUP_SREG, unix.NFT_REG_1))
}

func verdict(code uint32) *nl.RtAttr {
	return expr("immediate", u32(unix.NFTA_IMMEDIATE_DREG, unix.NFT_REG_VERDICT),
		nested(unix.NFTA_IMMEDIATE_DATA, nested(unix.NFTA_DATA_VERDICT, u32(unix.NFTA_VERDICT_CODE, code))))
}

// Attribute helpers: nftables' integers are big-endian, its strings
// NUL-terminated.

func str(typ int, s string) *nl.RtAttr { return nl.NewRtAttr(typ, nl.ZeroTerminated(s)) }

func u32(typ int, v uint32) *nl.RtAttr {
	return nl.NewRtAttr(typ, binary.BigEndian.AppendUint32(nil, v))
}

func nested(typ int, children ...*nl.RtAttr) *nl.RtAttr {
	a := nl.NewRtAttr(unix.NLA_F_NESTED|typ, nil)
	for _, c := range children {
		a.AddChild(c)
	}
	return a
}

func serial(as ...*nl.RtAttr) []byte {
	var b []byte
	for _, a := range as {
		b = append(b, a.Serialize()...)
	}
	return b
}

// udata is a rule's userdata holding comment, as libnftnl writes it:
// type, length, the NUL-terminated text.
func udata(comment string) []byte {
	return append([]byte{udataComment, byte(len(comment) + 1)}, nl.ZeroTerminated(comment)...)
}

// comment is the comment in a rule's userdata, or "" without one.
func comment(ud []byte) string {
	for len(ud) >= 2 {
		typ, l := ud[0], int(ud[1])
		if len(ud) < 2+l {
			break
		}
		if typ == udataComment {
			return cstring(ud[2 : 2+l])
		}
		ud = ud[2+l:]
	}
	return ""
}

// elements are the addresses in a NFTA_SET_ELEM_LIST_ELEMENTS list.
func elements(list []byte) []netip.Addr {
	var out []netip.Addr
	for _, e := range attrs(list) {
		key := attrMap(attrMap(e.value)[unix.NFTA_SET_ELEM_KEY])
		if a, ok := netip.AddrFromSlice(key[unix.NFTA_DATA_VALUE]); ok {
			out = append(out, a)
		}
	}
	return out
}

func attrMap(b []byte) map[uint16][]byte {
	as := attrs(b)
	m := make(map[uint16][]byte, len(as))
	for _, a := range as {
		m[a.typ] = a.value
	}
	return m
}

// nftMsg is one message of a batch: its NFT_MSG_* type, flags beside
// NLM_F_REQUEST|NLM_F_ACK, attributes, and what it does, for errors. Its
// family is the arp family unless it is a table message of transact.
type nftMsg struct {
	op, flags uint16
	attrs     []byte
	what      string
}

// commit sends msgs as one batch of the arp family: one transaction.
func (n *NFTables) commit(msgs []nftMsg) error {
	fam := make([]uint8, len(msgs))
	for i := range fam {
		fam[i] = unix.NFPROTO_ARP
	}
	return n.batch(msgs, fam)
}

var errBatch = errors.New("batch refused")

// batch sends msgs, msgs[i] in family fams[i], between
// NFNL_MSG_BATCH_BEGIN and END, which the kernel commits as one
// transaction, and waits for its answer to each.
func (n *NFTables) batch(msgs []nftMsg, fams []uint8) error {
	if len(msgs) == 0 {
		return nil
	}
	seq := n.seq.Add(uint32(len(msgs)+2)) - uint32(len(msgs)+2)
	buf := message(unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, seq, unix.NFNL_SUBSYS_NFTABLES, unix.NFPROTO_UNSPEC, nil)
	seq++
	acks := map[uint32]string{}
	for i, m := range msgs {
		buf = append(buf, message(unix.NFNL_SUBSYS_NFTABLES<<8|m.op, unix.NLM_F_REQUEST|unix.NLM_F_ACK|m.flags, seq, 0, fams[i], m.attrs)...)
		acks[seq] = m.what
		seq++
	}
	buf = append(buf, message(unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, seq, unix.NFNL_SUBSYS_NFTABLES, unix.NFPROTO_UNSPEC, nil)...)

	n.sock.Lock()
	defer n.sock.Unlock()
	if err := unix.Sendto(n.sock.GetFd(), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nft batch: send: %w", err)
	}
	var errs []error
	for len(acks) > 0 {
		got, _, err := n.sock.Receive()
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("nft batch: %w", err))...)
		}
		for _, m := range got {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			errno := int32(nl.NativeEndian().Uint32(m.Data[:4]))
			what, ours := acks[m.Header.Seq]
			if !ours {
				if errno != 0 { // the batch itself refused: no answer for its messages follows
					return errors.Join(append(errs, fmt.Errorf("nft: %w: %w", errBatch, syscall.Errno(-errno)))...)
				}
				continue
			}
			delete(acks, m.Header.Seq)
			if errno != 0 {
				errs = append(errs, fmt.Errorf("nft %s: %w", what, syscall.Errno(-errno)))
			}
		}
	}
	return errors.Join(errs...)
}
