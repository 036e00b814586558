// Package nladdr reads a network namespace's addresses, `ip -o addr show`,
// through a route netlink socket of its own, parsing each message of the
// dump as it arrives into a link index and a prefix.
//
// netlink.Handle.AddrList keeps every message of the dump, then parses each
// into a netlink.Addr, and asks the kernel for every link's addresses even
// when it returns one link's. With 10,000 Service addresses on kube-ipvs0
// that is 10,000 parsed addresses for the node read, which wants none of
// them, and for the kube-ipvs0 read of every full sync. Here the kube-ipvs0
// read asks the kernel for that link alone (strict checking), and the node
// read skips kube-ipvs0's messages by their header, before any attribute
// is parsed.
//
// Subscribe follows the same messages as events (`ip monitor address`),
// parsed the same way, for the address manager's watch of kube-ipvs0, to
// which every bind of a sync is one event.
//
// It owns the dump's socket, the subscription's and the parse of
// RTM_NEWADDR and RTM_DELADDR messages; it never writes an address
// (internal/addrmgr binds and unbinds) and never decides which addresses
// are the node's (internal/nodeenv).
package nladdr
