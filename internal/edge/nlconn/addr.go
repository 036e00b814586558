package nlconn

import (
	"errors"
	"net/netip"
)

// Addr is one address of a dump: `ip -o addr show` prints its link and its
// prefix.
type Addr struct {
	// LinkIndex is the interface index of the link it is on.
	LinkIndex int
	// Prefix is the local address with its prefix length (IFA_LOCAL, else
	// IFA_ADDRESS: on a point-to-point link IFA_ADDRESS is the peer).
	Prefix netip.Prefix
}

// AddrFilter says which links' addresses a dump returns.
type AddrFilter struct {
	// Link, when not 0, is the only link whose addresses are dumped
	// (`ip addr show dev`): the kernel sends no other's when strict
	// checking is on (Linux 4.20), and they are skipped otherwise.
	Link int
	// Except, when not 0, is a link whose addresses are skipped, by the
	// message's header before its attributes are read.
	Except int
}

// wants reports whether the filter keeps an address of link index.
func (f AddrFilter) wants(index int) bool {
	return (f.Link == 0 || index == f.Link) && (f.Except == 0 || index != f.Except)
}

// ErrAddrMessage is returned for an RTM_NEWADDR message the parse cannot read.
var ErrAddrMessage = errors.New("malformed RTM_NEWADDR message")
