// Package addrmgr owns the addresses of kube-ipvs0, the dummy device every
// service VIP is bound on (`ip addr add|del ADDR/32 dev kube-ipvs0`): the
// Manager binds the desired VIPs, asking the node-IP guard (internal/decide/guard,
// pure) about each immediately before `ip addr add`, and removes whatever
// is undesired or protected, and follows the device through an address
// subscription (`ip monitor address dev kube-ipvs0`). It touches no kernel
// itself: addrmgr/kernel is the netlink side, addrmgrtest the in-memory one
// for unit tests. It never touches another interface, never brings
// kube-ipvs0 up, and writes no file.
package addrmgr
