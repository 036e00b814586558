package iptables

// What the kernel reports of an ipset, and the create arguments the proxy
// gives every set. The netlink client that reads and writes them is
// iptables/kernel; everything here is plain data.

const (
	// BitmapPortFrom and BitmapPortTo are the range every bitmap:port set is
	// created with, as kube-proxy does: `ipset create X bitmap:port range 0-65535`.
	BitmapPortFrom = 0
	BitmapPortTo   = 65535
	// HashSize is the initial hashsize, kube-proxy's; the kernel grows it
	// as needed (and does not compare it in `ipset create -exist`). The
	// maxelem of a hash set is MaxElemFor its planned entries.
	HashSize = 1024
)

// The create-time extensions of a set (IPSET_FLAG_WITH_* of
// linux/netfilter/ipset/ip_set.h), as KernelSet.CadtFlags reports them:
// `ipset create ... counters comment forceadd skbinfo`.
const (
	FlagWithCounters uint32 = 1 << 3
	FlagWithComment  uint32 = 1 << 4
	FlagWithForceAdd uint32 = 1 << 5
	FlagWithSKBInfo  uint32 = 1 << 6
)

// KernelSet is a set as the kernel reports it in a dump (`ipset save`).
type KernelSet struct {
	Name     string
	Type     string
	Family   string
	PortFrom uint16
	PortTo   uint16
	MaxElem  uint32
	// Timeout is the default timeout (0: created without one).
	Timeout uint32
	// CadtFlags are the extensions it was created with (FlagWith*).
	CadtFlags uint32
	// Netmask is a hash:ip netmask other than the host length (0: none).
	Netmask uint8
	// References counts the iptables rules (and list:set sets) holding it.
	References uint32
	Entries    []Entry
	// unchanged is set by a full sync's read on a set that held the
	// mirror's entries, which it then leaves out (listCompared).
	unchanged bool
}
