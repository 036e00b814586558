package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/recovery"
)

// cleanupNode is `ipvs-proxy cleanup` and `ipvs-proxy run --cleanup`: it
// removes what the proxy created on this node (its virtual servers,
// kube-ipvs0, its chains and ipsets) and nothing else, prints one summary
// line to w, and returns a failure (exit 1) when something could not be
// removed. exclude is --ipvs-exclude-cidrs, stateDir --state-dir (its
// ownership journal); log may be nil.
func cleanupNode(w io.Writer, exclude []netip.Prefix, stateDir string, log *zap.Logger) error {
	res, err := cleanupKernel(recovery.CleanupOptions{ExcludeCIDRs: exclude, StateDir: stateDir, Log: log})
	if res != nil {
		dev := "no " + addrmgr.Device
		if res.DeviceDeleted {
			dev = fmt.Sprintf("%s deleted with %d address(es)", addrmgr.Device, res.AddressesDeleted)
		}
		fams := strings.Join(res.Families, ", ")
		if fams == "" {
			fams = "none"
		}
		fmt.Fprintf(w, "cleanup: %d virtual server(s) deleted; %s; no chain, rule or ipset of the proxy left for: %s\n",
			res.VirtualServersDeleted, dev, fams)
	}
	if err != nil {
		return failure(err)
	}
	return nil
}

// cleanupKernel is recovery.Cleanup; tests replace it.
var cleanupKernel = recovery.Cleanup

func newCleanupCommand() *cobra.Command {
	var exclude []netip.Prefix
	stateDir := config.DefaultStateDir
	cmd := &cobra.Command{
		Use:   "cleanup [--ipvs-exclude-cidrs CIDRS] [--state-dir DIR]",
		Short: "Remove what the proxy created on this node, and nothing else",
		Long: `cleanup takes ipvs-proxy off this node: it deletes the IPVS virtual servers the
proxy owns (those on addresses bound on kube-ipvs0, NodePort servers: a node
address with a port in 30000-32767, and those its ownership journal in
--state-dir names, such as an externalIP on a node address served at L4),
then kube-ipvs0 with its addresses,
then the proxy's iptables chains, its jump rules in the built-in chains and its
ipsets (IPv4 and IPv6). Foreign virtual servers (keepalived, kube-vip, manual
ipvsadm entries outside the NodePort range), other interfaces' addresses and
other chains stay. Stop the proxy first. A second cleanup changes nothing.
The same as run --cleanup. Exit status 0, or 1 when something could not be
removed (run it again).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cleanupNode(cmd.OutOrStdout(), exclude, stateDir, nil)
		},
	}
	cmd.Flags().Var(newPrefixList(&exclude, "strings"), "ipvs-exclude-cidrs", "CIDRs whose IPVS virtual servers are never deleted.")
	cmd.Flags().StringVar(&stateDir, "state-dir", stateDir, "Directory of run's state: the ownership journal (ipvs-owned) is read and removed.")
	return cmd
}
