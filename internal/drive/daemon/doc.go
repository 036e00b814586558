// Package daemon is `ipvs-proxy run`: it wires the informers to the planner
// and the kernel applier and drives them with the sync loop.
//
// At start, before the informer caches are waited for, Run removes from
// kube-ipvs0 the addresses the guard protects with what it knows offline
// (guardPass). The loop (Loop) applies nothing before the informer caches
// have synced;
// then it runs one full sync (reads the kernel — `ipvsadm -S -n`, `ip addr
// show dev kube-ipvs0`, `ipset list`, `iptables-save` — and repairs any
// drift), a partial sync for each batch of changed services (only they are
// converted and planned again, with planner.Incremental, and only their
// virtual servers are touched), and another full sync every --sync-period.
// A change of the node's own addresses or of any Node makes the next sync a
// full one.
// Changes are coalesced: with --min-sync-period 0 a change is applied at
// once and whatever arrives during an apply is batched into the next one;
// what arrives during a periodic full sync is applied in a turn between its
// steps (turn.go), not after it.
// A failed apply is retried with exponential backoff; a failure outside a
// service, or a kernel that could not be read, is retried as a full sync.
//
// After every sync the loop reports refusals as Events, updates /healthz,
// the healthCheckNodePort servers and the metrics. Run builds the real
// stack (client-go, netlink, IPVS, ipsets, iptables) in the network
// namespace of the calling process.
//
// The package owns no kernel access of its own: the node's addresses and
// routes are read through internal/edge/nodeenv, the guard is the planner's
// (internal/decide/guard), the kernel is changed by the applier. It never
// modifies an API object other than by creating Events, and on shutdown it
// leaves the data plane as it is.
package daemon
