package main

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/logging"
)

func newRunCommand() *cobra.Command {
	c := config.Default()
	cmd := &cobra.Command{
		Use:   "run [flags]",
		Short: "Program this node's IPVS, kube-ipvs0, ipsets and iptables from the cluster, until stopped",
		Long: `run watches Services, EndpointSlices and Nodes on the API server and keeps this
node's IPVS virtual servers, kube-ipvs0 addresses, ipsets and iptables rules
equal to what plan prints for the same objects. At start, before the API
server answers, the addresses on kube-ipvs0 that what it knows offline
protects (the node's own addresses and routes, the Nodes of its --state-dir
cache, the API server) are removed; nothing else is applied until the
informer caches have synced; then one full sync reads the kernel and repairs
it, each change is applied to the changed services only, and a full sync
runs again every --sync-period. Refusals become Warning Events on the
Service; /healthz, /livez and /metrics answer on their bind addresses.

SIGTERM or SIGINT stops watching and exits, leaving the data plane as it is:
a restarted proxy adopts it without changing an unchanged object.`,
		Example: `  ipvs-proxy run --kubeconfig /etc/kubernetes/proxy.conf --hostname-override "$NODE_NAME" --cluster-cidr 10.244.0.0/16
  ipvs-proxy run --config /etc/kube-proxy/config.conf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.Complete(cmd.Flags()); err != nil {
				return err
			}
			if err := validatePlanningOptions(&c.Planning); err != nil {
				return err
			}
			log, err := logging.New(logging.Options{Level: c.LogLevel, Format: c.LogFormat})
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			logging.Install(log)
			if c.Cleanup {
				return cleanupNode(cmd.OutOrStdout(), c.Planning.ExcludeCIDRs, c.StateDir, false, log)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return failure(runDaemon(ctx, c, log))
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	c.AddFlags(fs, addPlanningFlags)
	return cmd
}
