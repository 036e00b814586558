package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/recovery"
)

// recoverOutcome is what recover found and did; recoverExitCode maps it
// to the shared exit statuses (exit.go).
type recoverOutcome int

const (
	// recoverNothing: no bad address on kube-ipvs0.
	recoverNothing recoverOutcome = iota
	// recoverFound: bad addresses found in a dry run; nothing changed.
	recoverFound
	// recoverRemoved: --apply removed every bad address.
	recoverRemoved
	// recoverFailed: a removal failed, or --apply refused the API server.
	recoverFailed
)

// recoverFlags are the flags of `recover`.
type recoverFlags struct {
	kubeconfig, master, hostname string
	stateDir                     string
	timeout, grace               time.Duration
	protected, clusterCIDRs      []netip.Prefix
	maxVirtualServers            int
	exclude                      []netip.Prefix
	stale, apply, force          bool
	output                       string
	procRoot                     string
}

// openRecoveryKernel opens the node's kernel; tests replace it.
var openRecoveryKernel = func() (recovery.NodeKernel, func(), error) {
	k, err := recovery.OpenKernel()
	if err != nil {
		return nil, nil, err
	}
	return k, k.Close, nil
}

func newRecoverCommand() *cobra.Command {
	f := &recoverFlags{}
	cmd := &cobra.Command{
		Use:   "recover [--apply] [flags]",
		Short: "Find and strip node addresses and other bad addresses bound on kube-ipvs0",
		Long: `recover finds the addresses on kube-ipvs0 that must not be there, with or
without a reachable API server: this node's and every other node's addresses
(from the API server, or cached in --state-dir by run), the default gateways,
the API server's address from the kubeconfig, --protected-cidrs, the addresses
that are never a service VIP (loopback, link-local, multicast, broadcast,
unspecified, pod addresses), prefixes wider than /32 or /128, and — when the
API server answers, or with --stale — addresses no current Service wants. Each
goes together with the IPVS virtual servers on it (unless it stays local on
another interface of this node: then its virtual servers stay too).

Without --apply it changes nothing and prints what it would remove and why.
It also names any other service proxy (kube-proxy, another ipvs-proxy run)
running on the node: stop it first, or it adds the addresses back.

When the API server answers but does not list this node (a kubeconfig for
another cluster, an empty cluster, a node name that is not this node's),
its Services say nothing about this node: --apply then refuses and changes
nothing unless --force.

` + exitStatusHelp,
		Example: `  ipvs-proxy recover                      # dry run, offline or online
  ipvs-proxy recover --apply              # remove what the dry run listed
  ipvs-proxy recover --kubeconfig /etc/kubernetes/kubelet.conf --timeout 3s -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRecover(cmd, f) },
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.BoolVar(&f.apply, "apply", false, "Remove what was found (default: dry run, change nothing).")
	fs.BoolVar(&f.force, "force", false, "With --apply, trust an API server whose Nodes do not include this node (another cluster, an empty one): by default --apply then refuses and changes nothing.")
	fs.StringVarP(&f.output, "output", "o", "text", "Output format: text or json.")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig file; empty means the in-cluster configuration, or offline when there is none.")
	fs.StringVar(&f.master, "master", "", "The address of the Kubernetes API server (overrides any value in kubeconfig).")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "How long to wait for the API server (and the name lookup of its address) before going on offline.")
	fs.StringVar(&f.stateDir, "state-dir", config.DefaultStateDir, "Directory where run caches every Node's addresses, read offline.")
	fs.DurationVar(&f.grace, "deleted-node-grace-period", config.DefaultDeletedNodeGrace, "How long after it was last seen a Node the cache in --state-dir records as deleted stays protected.")
	fs.StringVar(&f.hostname, "hostname-override", "", "This node's name; empty means the hostname.")
	fs.BoolVar(&f.stale, "stale", false, "Without an API server, also remove addresses that have no IPVS virtual server.")
	fs.Var(newPrefixList(&f.protected, "strings"), "protected-cidrs", "CIDRs that are never bound on kube-ipvs0.")
	fs.Var(newPrefixList(&f.clusterCIDRs, "string"), "cluster-cidr", "Comma-separated pod CIDRs: pod addresses are never service VIPs.")
	fs.Var(newPrefixList(&f.exclude, "strings"), "ipvs-exclude-cidrs", "CIDRs whose IPVS virtual servers are never removed.")
	fs.IntVar(&f.maxVirtualServers, "max-virtual-servers-per-service", convert.DefaultMaxVirtualServers, "As run's: a Service's external addresses past it are not wanted (give run's value if it is not the default).")
	fs.StringVar(&f.procRoot, "proc-root", "/proc", `Where to look for other proxies' processes ("-" skips the scan).`)
	_ = fs.MarkHidden("proc-root")
	return cmd
}

func runRecover(cmd *cobra.Command, f *recoverFlags) error {
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("recover: -o %q: must be text or json", f.output)
	}
	o := recovery.Options{
		NodeName:                    f.hostname,
		StateDir:                    f.stateDir,
		DeletedNodeGrace:            f.grace,
		Timeout:                     f.timeout,
		ProtectedCIDRs:              f.protected,
		ClusterCIDRs:                f.clusterCIDRs,
		ExcludeCIDRs:                f.exclude,
		MaxVirtualServersPerService: f.maxVirtualServers,
		Stale:                       f.stale,
		Apply:                       f.apply,
		Force:                       f.force,
		ProcRoot:                    f.procRoot,
	}
	if o.NodeName == "" {
		h, _ := os.Hostname()
		o.NodeName = strings.ToLower(h)
	}
	var notes []string
	cfg, err := recovery.RESTConfig(f.kubeconfig, f.master, f.timeout)
	switch {
	case errors.Is(err, recovery.ErrNoAPIServer):
	case err != nil:
		notes = append(notes, "API server not used: "+err.Error())
	default:
		o.APIServerHost = cfg.Host
		o.APIServerInCluster = f.kubeconfig == "" && f.master == ""
		if o.Client, err = kubernetes.NewForConfig(cfg); err != nil {
			notes = append(notes, "API server not used: "+err.Error())
			o.Client = nil
		}
	}
	if f.apply {
		// One log line per removal on stderr, for the console record.
		enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
		o.Log = zap.New(zapcore.NewCore(enc, zapcore.AddSync(cmd.ErrOrStderr()), zap.InfoLevel))
	}
	k, closeKernel, err := openRecoveryKernel()
	if err != nil {
		return failure(fmt.Errorf("recover: %w", err))
	}
	defer closeKernel()
	rep, recErr := recovery.Recover(context.Background(), k, o)
	untrusted := errors.Is(recErr, recovery.ErrUntrustedCluster)
	if recErr != nil && !untrusted {
		return failure(fmt.Errorf("recover: %w", recErr))
	}
	rep.Warnings = append(notes, rep.Warnings...)
	outcome := recoverOutcomeOf(rep)
	if untrusted {
		outcome = recoverFailed
	}
	code := recoverExitCode(outcome)
	out := cmd.OutOrStdout()
	if f.output == "json" {
		err = writeRecoverJSON(out, rep, code)
	} else {
		err = writeRecoverText(out, rep)
	}
	if err != nil {
		return failure(fmt.Errorf("recover: %w", err))
	}
	switch {
	case untrusted:
		return exitStatus{code, fmt.Sprintf("recover: %v; nothing changed", recErr)}
	case outcome == recoverNothing:
		return nil
	case outcome == recoverFound:
		return exitStatus{code, fmt.Sprintf("%d bad address(es) on %s; dry run, nothing changed (run again with --apply)", len(rep.Findings), addrmgr.Device)}
	case outcome == recoverRemoved:
		return exitStatus{code, fmt.Sprintf("removed %d address(es) from %s and %d virtual server(s)", len(rep.Result.Unbound), addrmgr.Device, len(rep.Result.Deleted))}
	default:
		return exitStatus{code, fmt.Sprintf("recover: %v", rep.Result.Err())}
	}
}

// recoverExitCode is the shared exit status (exit.go) of an outcome:
// nothing and removed are success, found is 3, failed 1.
func recoverExitCode(o recoverOutcome) int {
	switch o {
	case recoverFound:
		return exitFound
	case recoverFailed:
		return exitFailure
	default:
		return exitOK
	}
}

// recoverOutcomeOf is what a report says recover found and did.
func recoverOutcomeOf(rep *recovery.Report) recoverOutcome {
	switch {
	case len(rep.Findings) == 0:
		return recoverNothing
	case !rep.Applied:
		return recoverFound
	case rep.Result.Err() != nil:
		return recoverFailed
	default:
		return recoverRemoved
	}
}

func keyStrings(fd recovery.Finding) []string {
	out := make([]string, len(fd.VirtualServers))
	for i, k := range fd.VirtualServers {
		out[i] = k.String()
	}
	return out
}

func writeRecoverText(w io.Writer, rep *recovery.Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "API server: %s\nNode address cache: %s\n", rep.APIServer, rep.NodeCache)
	if len(rep.Findings) == 0 {
		fmt.Fprintf(&b, "No bad address on %s.\n", addrmgr.Device)
	} else {
		fmt.Fprintf(&b, "\nAddresses on %s that %s, with the IPVS virtual servers on them:\n", addrmgr.Device, map[bool]string{false: "would go", true: "went"}[rep.Applied])
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ADDRESS\tREASON\tVIRTUAL SERVERS\tDETAIL")
		for _, fd := range rep.Findings {
			vs := strings.Join(keyStrings(fd), ", ")
			if vs == "" {
				vs = "-"
			}
			detail := fd.Detail
			if fd.Kept != "" {
				detail += " (" + fd.Kept + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", fd.Address, fd.Reason, vs, detail)
		}
		_ = tw.Flush()
	}
	for _, wmsg := range rep.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", wmsg)
	}
	if len(rep.Findings) > 0 {
		if rep.Applied {
			r := rep.Result
			fmt.Fprintf(&b, "\nRemoved %d address(es) and %d virtual server(s).\n", len(r.Unbound), len(r.Deleted))
			for _, err := range r.Errors {
				fmt.Fprintf(&b, "FAILED: %v\n", err)
			}
		} else {
			fmt.Fprintf(&b, "\nDry run: nothing changed. Run `ipvs-proxy recover --apply` to remove them.\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// recoverJSON is `recover -o json`: recovery.Report's fields, the findings'
// virtual servers and the removals as ipvsadm and ip name them, the exit
// status. It is the report's only JSON shape.
type recoverJSON struct {
	APIServer    string             `json:"apiServer"`
	NodeCache    string             `json:"nodeCache"`
	Findings     []findingJSON      `json:"findings"`
	Applied      bool               `json:"applied"`
	Removed      *removedJSON       `json:"removed,omitempty"`
	OtherProxies []recovery.Process `json:"otherProxies"`
	Warnings     []string           `json:"warnings"`
	Untrusted    string             `json:"untrusted,omitempty"`
	ExitCode     int                `json:"exitCode"`
}

type findingJSON struct {
	recovery.Finding
	VirtualServers []string `json:"virtualServers"`
}

type removedJSON struct {
	Addresses      []netip.Prefix `json:"addresses"`
	VirtualServers []string       `json:"virtualServers"`
	Errors         []string       `json:"errors"`
}

func writeRecoverJSON(w io.Writer, rep *recovery.Report, code int) error {
	j := recoverJSON{APIServer: rep.APIServer, NodeCache: rep.NodeCache, Applied: rep.Applied,
		Findings: []findingJSON{}, OtherProxies: rep.OtherProxies, Warnings: append([]string{}, rep.Warnings...), Untrusted: rep.Untrusted, ExitCode: code}
	for _, fd := range rep.Findings {
		j.Findings = append(j.Findings, findingJSON{Finding: fd, VirtualServers: keyStrings(fd)})
	}
	if r := rep.Result; r != nil {
		j.Removed = &removedJSON{Addresses: append([]netip.Prefix{}, r.Unbound...), VirtualServers: []string{}, Errors: []string{}}
		for _, k := range r.Deleted {
			j.Removed.VirtualServers = append(j.Removed.VirtualServers, k.String())
		}
		for _, err := range r.Errors {
			j.Removed.Errors = append(j.Removed.Errors, err.Error())
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(j)
}
