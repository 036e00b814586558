// Package kernel is the iptables package's kernel edge: the ipsets of a
// network namespace over one netfilter netlink socket (Sets; `ipset`) and
// one family's iptables binaries (Runner; `iptables-save`,
// `iptables-restore --noflush`, `iptables -C`), and NewSyncer, which joins
// them into an iptables.Syncer.
//
// It owns that socket and those exec calls and nothing else: which sets,
// entries, chains and rules to write is decided by iptables.Syncer over
// the iptables.SetKernel and iptables.RuleRunner interfaces. Only the
// commands that touch the node (run, recover, cleanup) open it. It builds
// on Linux only; on other systems the package is empty.
package kernel
