package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/recovery"
)

// ErrOtherProxy: cleanup found another service proxy running on the node
// and removed nothing.
var ErrOtherProxy = errors.New("another service proxy is running on this node")

// cleanupRequest is what `ipvs-proxy cleanup` (or run --cleanup) is asked.
type cleanupRequest struct {
	// exclude is --ipvs-exclude-cidrs, stateDir --state-dir (its ownership
	// journal).
	exclude  []netip.Prefix
	stateDir string
	// force is --force: remove even with another service proxy running.
	force bool
	// kubeProxyMode is --kube-proxy-mode: kube-proxy serves the node in
	// this mode (iptables, nftables) and is no reason to refuse; with
	// iptables, the chains that mode shares by name stay (the way out).
	kubeProxyMode string
	// log may be nil.
	log *zap.Logger
}

// cleanupNode is `ipvs-proxy cleanup` and `ipvs-proxy run --cleanup`: it
// removes what the proxy created on this node (its virtual servers,
// kube-ipvs0, its chains and ipsets) and nothing else, prints one summary
// line to w, and returns a failure (exit 1) when something could not be
// removed.
//
// Unless force, it first looks for another service proxy running on the
// node (kube-proxy after a rollback, another `ipvs-proxy run`): the names
// are shared, so removing "ours" would take that proxy's kube-ipvs0,
// virtual servers, ipsets and chains away under its traffic. Then it
// removes nothing and fails with ErrOtherProxy, naming the process. With
// kubeProxyMode, kube-proxy is expected: in iptables or nftables mode it
// serves from none of what cleanup removes.
func cleanupNode(w io.Writer, req cleanupRequest) error {
	switch req.kubeProxyMode {
	case "", "iptables", "nftables":
	default:
		return fmt.Errorf("--kube-proxy-mode %q: want iptables or nftables (kube-proxy's IPVS mode serves from what cleanup removes)", req.kubeProxyMode)
	}
	if !req.force {
		procs, err := findProxies("/proc")
		if err != nil {
			return failure(fmt.Errorf("cleanup: look for other service proxies in /proc: %w", err))
		}
		if req.kubeProxyMode != "" {
			procs = slices.DeleteFunc(procs, func(p recovery.Process) bool { return p.Name == "kube-proxy" })
		}
		if len(procs) > 0 {
			p := procs[0]
			return failure(fmt.Errorf("cleanup: %w: %s (pid %d: %s) serves from the same kube-ipvs0, IPVS table, ipsets and chains; nothing removed (stop it first, or --force)",
				ErrOtherProxy, p.Name, p.PID, p.Cmdline))
		}
	}
	res, err := cleanupKernel(recovery.CleanupOptions{ExcludeCIDRs: req.exclude, StateDir: req.stateDir, KubeProxyMode: req.kubeProxyMode, Log: req.log})
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
		if res.StillOpen > 0 {
			fmt.Fprintf(w, "cleanup: %d connection(s) this node opened from %s's addresses were still open after %v and ended with it\n",
				res.StillOpen, addrmgr.Device, recovery.DefaultDrain)
		}
	}
	if err != nil {
		return failure(err)
	}
	return nil
}

// cleanupKernel is recovery.Cleanup and findProxies recovery.FindProxies;
// tests replace them.
var (
	cleanupKernel = recovery.Cleanup
	findProxies   = recovery.FindProxies
)

func newCleanupCommand() *cobra.Command {
	req := cleanupRequest{stateDir: config.DefaultStateDir}
	cmd := &cobra.Command{
		Use:   "cleanup [--ipvs-exclude-cidrs CIDRS] [--state-dir DIR] [--force | --kube-proxy-mode MODE]",
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
When another service proxy runs on the node (kube-proxy after a rollback, or
another ipvs-proxy run), cleanup removes nothing and fails naming it: the
names are shared, and that proxy serves traffic from them; --force removes
anyway. On the way out to kube-proxy's iptables or nftables mode, run it
with --kube-proxy-mode MODE once kube-proxy serves the node in that mode:
kube-proxy is then expected, and with iptables the chains that mode writes
under the same names (nat KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ,
filter KUBE-FORWARD, KUBE-PROXY-FIREWALL) and the jumps to them stay; before
kube-ipvs0 goes, connections the node itself opened from its addresses (to
a ClusterIP while kube-ipvs0 held it) are waited for, up to 10s, while new
ones take a node address. The same as run --cleanup. Exit status 0, or 1 when something could
not be removed (run it again) or another proxy runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cleanupNode(cmd.OutOrStdout(), req)
		},
	}
	cmd.Flags().Var(newPrefixList(&req.exclude, "strings"), "ipvs-exclude-cidrs", "CIDRs whose IPVS virtual servers are never deleted.")
	cmd.Flags().StringVar(&req.stateDir, "state-dir", req.stateDir, "Directory of run's state: the ownership journal (ipvs-owned) is read and removed.")
	cmd.Flags().BoolVar(&req.force, "force", false, "Remove even when another service proxy (kube-proxy, another ipvs-proxy run) is running on the node.")
	cmd.Flags().StringVar(&req.kubeProxyMode, "kube-proxy-mode", "", "kube-proxy serves this node in this mode (iptables or nftables): the way out; kube-proxy running is no refusal, and with iptables the chains that mode shares by name stay.")
	return cmd
}
