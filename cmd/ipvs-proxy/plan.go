package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/nodeplan"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/manifest"
)

// planFlags are the flags of `plan` beyond the planning flags.
type planFlags struct {
	files     []string
	output    string
	nodeCache string
	grace     time.Duration
	opts      planner.Options
}

func newPlanCommand() *cobra.Command {
	f := &planFlags{}
	cmd := &cobra.Command{
		Use:   "plan -f FILE... --node-ip IP... [--node-name NAME] [flags]",
		Short: "Print what run would program on a node, offline",
		Long: `plan reads Services, EndpointSlices and Nodes from files (-f, repeatable; "-" is
stdin; multi-document YAML, JSON, or a List as kubectl get -o yaml prints it)
and prints exactly what run would program on the node named by --node-name
with the addresses --node-ip: the IPVS table in ipvsadm -S -n form, the
kube-ipvs0 addresses, the ipsets in ipset save form, the iptables rules in
iptables-save form, and every refusal with its reason. The output is sorted
and byte-for-byte deterministic. It touches no kernel and no API server.

Without --node-name, the node is the one Node in the input that has one of
the --node-ip addresses.`,
		Example: `  kubectl get svc,endpointslices,nodes -A -o yaml > cluster.yaml
  ipvs-proxy plan -f cluster.yaml --node-name n1 --node-ip 10.0.0.211
  ipvs-proxy plan -f - --node-ip 10.0.0.211 --refuse-node-external-ips -o json < cluster.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPlan(cmd, f) },
	}
	f.register(cmd.Flags())
	return cmd
}

// register adds plan's flags to fs; explain takes the same.
func (f *planFlags) register(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringArrayVarP(&f.files, "filename", "f", nil, `File of Services, EndpointSlices and Nodes: YAML, JSON or a List (repeatable; "-" is stdin).`)
	fs.StringVarP(&f.output, "output", "o", "text", "Output format: text or json.")
	addNodeFlags(fs, &f.opts)
	fs.StringVar(&f.nodeCache, "node-cache", "", "A node address cache file run wrote (--state-dir/"+informers.NodeAddressFile+"): its Nodes are protected too, and the deleted ones it records for --deleted-node-grace-period after they were last seen.")
	fs.DurationVar(&f.grace, "deleted-node-grace-period", config.DefaultDeletedNodeGrace, "With --node-cache: how long after it was last seen a deleted Node stays protected.")
	fs.SetNormalizeFunc(config.NormalizeAliases)
	addPlanningFlags(fs, &f.opts)
}

// check validates the flags of verb (plan, explain); files says whether
// -f is required.
func (f *planFlags) check(verb string, files bool) error {
	if files && len(f.files) == 0 {
		return fmt.Errorf("%s: -f FILE is required (\"-\" reads stdin)", verb)
	}
	if len(f.opts.LocalAddrs) == 0 {
		return fmt.Errorf("%s: --node-ip is required: the node's own addresses decide NodePorts and what the guard protects", verb)
	}
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("%s: invalid argument %q for \"-o\" flag: must be text or json", verb, f.output)
	}
	if err := validatePlanningOptions(&f.opts); err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	if n := countOf(f.files, "-"); n > 1 {
		return fmt.Errorf("%s: stdin (-f -) can be read only once", verb)
	}
	return nil
}

// readFiles reads the -f files of verb.
func (f *planFlags) readFiles(cmd *cobra.Command, verb string) (*manifest.Objects, error) {
	objs, err := manifest.ReadFiles(f.files, cmd.InOrStdin())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	return objs, nil
}

// plan plans the node from objs as the flags say, with verb's warnings
// on stderr.
func (f *planFlags) plan(cmd *cobra.Command, verb string, objs *manifest.Objects) (*nodeplan.Result, error) {
	res, err := nodeplan.Plan(nodeplan.Input{Objects: objs, NodeCache: f.nodeCache, Grace: f.grace, Now: time.Now(), Options: f.opts})
	for _, w := range res.Warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "ipvs-proxy: %s: %s\n", verb, w)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	return res, nil
}

func runPlan(cmd *cobra.Command, f *planFlags) error {
	if err := f.check("plan", true); err != nil {
		return err
	}
	objs, err := f.readFiles(cmd, "plan")
	if err != nil {
		return err
	}
	res, err := f.plan(cmd, "plan", objs)
	if err != nil {
		return err
	}
	state := res.State
	out := cmd.OutOrStdout()
	if f.output == "json" {
		err = planner.WriteJSON(out, state)
	} else {
		err = planner.WriteText(out, state)
	}
	return failure(err)
}

func countOf(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}
