// Package nlsub subscribes to route netlink multicast groups (`ip monitor`)
// and decodes each message as it is read, for the kube-ipvs0 watch
// (internal/nladdr) and the route watch (internal/nodeenv). It owns the
// subscription's socket and its read loop; what a message means is the
// caller's (decode), and following a subscription across losses is
// internal/nlwatch's.
package nlsub
