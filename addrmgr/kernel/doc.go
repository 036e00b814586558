// Package kernel is addrmgr's kernel side: kube-ipvs0 over netlink (the
// device, its address dump, batched binds, the address subscription). It
// implements addrmgr.Link and addrmgr.Watcher, decides nothing, and never
// touches another interface nor brings kube-ipvs0 up.
package kernel
