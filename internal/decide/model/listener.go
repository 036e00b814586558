package model

import (
	"net/netip"
	"strings"
)

// Listener is a socket the node itself serves on (`ss -ltun`): a TCP or
// SCTP listener, or a bound, unconnected UDP socket. An unspecified Addr
// (0.0.0.0, ::) listens on every address of its family, :: on IPv4 too
// (unless IPV6_V6ONLY, which the socket table does not show).
type Listener struct {
	Protocol Protocol
	Addr     netip.Addr
	Port     uint16
}

// String is "tcp 0.0.0.0:22".
func (l Listener) String() string {
	return string(l.Protocol) + " " + netip.AddrPortFrom(l.Addr, l.Port).String()
}

// CompareListeners orders listeners by protocol, port, then address.
func CompareListeners(a, b Listener) int {
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	return a.Addr.Compare(b.Addr)
}
