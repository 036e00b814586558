// Command ipvs-proxy is a Kubernetes service proxy for IPVS clusters, run as
// a DaemonSet in place of kube-proxy's IPVS mode. This package owns the
// command line only: flags, subcommands and exit statuses. Planning lives in
// internal/decide/planner, conversion in informers, kernel access in ipvs, addrmgr
// and iptables; nothing here touches the kernel itself.
package main

import "os"

func main() {
	os.Exit(Main(ArgsFor(os.Args[0], os.Args[1:]), os.Stdin, os.Stdout, os.Stderr))
}
