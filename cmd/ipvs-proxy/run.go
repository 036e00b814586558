package main

import (
	"fmt"
	"strings"

	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

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
  ipvs-proxy run --config=/var/lib/kube-proxy/config.conf --hostname-override="$NODE_NAME"

Every kube-proxy 1.34 flag is accepted under its name; those with no
meaning here are named in one startup line. Invoked as kube-proxy (a
symbolic link), ipvs-proxy is ipvs-proxy run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.KubeProxy.Version {
				return printVersion(cmd.OutOrStdout())
			}
			if err := c.Complete(cmd.Flags()); err != nil {
				return err
			}
			if err := validatePlanningOptions(&c.Planning); err != nil {
				return err
			}
			if c.KubeProxy.WriteConfigTo != "" {
				if err := checkFile(c); err != nil {
					return err
				}
				return c.WriteFile(c.KubeProxy.WriteConfigTo)
			}
			log, err := logging.New(logging.Options{Level: c.LogLevel, Format: c.LogFormat, Verbosity: c.Verbosity})
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			logging.Install(log)
			if n := config.NoEffect(cmd.Flags(), c.IgnoredFlags); len(n) > 0 {
				log.Info("kube-proxy flags accepted with no effect in ipvs-proxy", zap.Strings("flags", n))
			}
			if len(c.IgnoredFlags) > 0 {
				log.Warn("flags ignored: --config is given, and as with kube-proxy the file wins over every kube-proxy flag except --hostname-override and the logging flags; set them in the file",
					zap.String("config", c.ConfigFile), zap.Strings("flags", c.IgnoredFlags))
			}
			if c.KubeProxyModeEmpty {
				log.Warn(`the KubeProxyConfiguration's mode is "", which kube-proxy runs as iptables: ipvs-proxy serves this node with IPVS, and its first full sync, once its own virtual servers and rules are in place, removes by name what kube-proxy's iptables mode left (KUBE-SVC-*, KUBE-SEP-*, KUBE-EXT-*, KUBE-FW-*, KUBE-SVL-*, KUBE-NODEPORTS; set mode: ipvs to say IPVS outright)`,
					zap.String("config", c.ConfigFile))
			}
			if c.KubeProxy.InitOnly {
				return initOnly(cmd.Context(), c, log)
			}
			if c.Cleanup {
				return cleanupNode(cmd.OutOrStdout(), cleanupRequest{exclude: c.Planning.ExcludeCIDRs, stateDir: c.StateDir, log: log})
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

// checkFile refuses what `run` starts with and only warns about: the
// fields of a KubeProxyConfiguration that kube-proxy 1.34 does not have.
// --init-only and --write-config-to check it before anything else.
func checkFile(c *config.Config) error {
	if len(c.UnknownFields) == 0 {
		return nil
	}
	return fmt.Errorf("--config %s: unknown field(s) %s: KubeProxyConfiguration v1alpha1 (kube-proxy 1.34) has no such field; a misspelt field keeps its default (run starts with a warning, as kube-proxy decodes leniently)",
		c.ConfigFile, strings.Join(c.UnknownFields, ", "))
}
