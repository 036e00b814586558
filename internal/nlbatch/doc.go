// Package nlbatch sends netlink requests many to a sendmsg and reads each
// one's acknowledgement, for the IPVS writes (ipvs/kernel: `ipvsadm -a`)
// and the binds on kube-ipvs0 (addrmgr: `ip addr add`). It owns the
// writing socket, the wire form of a request's headers and attributes
// (Message), and the matching of acknowledgements to requests by sequence
// number; what a request says is the caller's.
//
// The kernel's netlink_rcv_skb runs every request of a buffer in turn and
// answers each with an acknowledgement carrying its sequence number, so
// one request's failure is reported to it alone and the others go on: a
// batch costs one round trip instead of one per request, with the outcome
// of each.
package nlbatch
