// Package kernel is the ipvs package's kernel edge: the IPVS table of a
// network namespace over generic netlink (github.com/moby/ipvs for single
// writes and per-service reads, internal/edge/nlconn for the creations sent
// many to a sendmsg, a streamed dump of its own for the virtual servers;
// `ipvsadm`), the conntrack flows of removed UDP and SCTP real servers
// (ctnetlink; `conntrack -D`) and the kernel release (`uname -r`).
//
// It owns those sockets and nothing else: what to create, keep or delete is
// decided by ipvs.Reconciler over the ipvs.Table and ipvs.Conntrack
// interfaces these types implement. Only the commands that touch the node
// (run, recover, cleanup) open it. It builds on Linux only; on other
// systems the package is empty.
package kernel
