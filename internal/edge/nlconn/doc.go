// Package nlconn is the proxy's own netlink plumbing, below the kernel
// layers that say what goes over it:
//
//   - sockets in the calling thread's network namespace with the netlink
//     library's timeouts, so that a request the kernel never answers fails
//     instead of holding its caller (OpenSocket);
//   - batched requests: many to one sendmsg, each acknowledgement matched
//     to its request by sequence number, so that one failure is reported to
//     its request alone at the cost of one round trip (Message, Writer), for
//     the IPVS writes and the binds on kube-ipvs0;
//   - a namespace's addresses, `ip -o addr show`, parsed message by message
//     as the dump arrives (AddrDumper): the kube-ipvs0 read asks the kernel
//     for that link alone, the node read skips kube-ipvs0's messages by
//     their header, where netlink.Handle.AddrList keeps and parses every
//     message; and the same messages as events (SubscribeAddrs);
//   - route netlink subscriptions, `ip monitor`, decoded as read
//     (Subscribe), and the loop that follows one across losses (Follow).
//
// It decides nothing: what a request or a message means is its caller's
// (ipvs/kernel, addrmgr/kernel, internal/edge/nodeenv). It never writes an
// address itself.
package nlconn
