package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// subcommands are the constructors of ipvs-proxy's subcommands. Adding a
// subcommand is one line here (e.g. newRunCommand, newRecoverCommand,
// newCleanupCommand). Each command reads and writes through cmd.InOrStdin,
// cmd.OutOrStdout and cmd.ErrOrStderr, which the root sets.
var subcommands = []func() *cobra.Command{
	newPlanCommand,
	newExplainCommand,
	newRunCommand,
	newRecoverCommand,
	newCleanupCommand,
	newVersionCommand,
}

// newRootCommand builds the whole command tree.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "ipvs-proxy",
		Short: "A Kubernetes service proxy for IPVS clusters that never binds a node's address",
		Long: `ipvs-proxy programs IPVS virtual servers, the kube-ipvs0 addresses, ipsets and
iptables rules from the cluster's Services, EndpointSlices and Nodes, in place
of kube-proxy's IPVS mode. Its node-IP guard refuses any externalIP or
LoadBalancer IP that would hijack a node's address.

` + exitStatusHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	// --version, as cobra's own would print it through a template: a
	// template keeps text/template's reflective method calls in the
	// binary, and with them every exported method of every type the
	// linker sees converted to an interface (all of client-go's typed
	// clients), which makes the binary and its RSS before the first object
	// far larger (gobuild.NoTemplateExecution keeps it out).
	showVersion := root.Flags().BoolP("version", "v", false, "version for ipvs-proxy")
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if *showVersion {
			return printVersion(cmd.OutOrStdout())
		}
		return cmd.Help()
	}
	// Cobra's suggestions span several lines; Main adds them on one.
	root.DisableSuggestions = true
	root.SuggestionsMinimumDistance = 2
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})
	for _, sub := range subcommands {
		root.AddCommand(sub())
	}
	return root
}

// KubeProxyName is the program name under which ipvs-proxy is `ipvs-proxy
// run`: a symbolic link named kube-proxy takes kube-proxy's command lines
// (`kube-proxy --config=... --hostname-override=...`) unchanged.
const KubeProxyName = "kube-proxy"

// ArgsFor returns the arguments Main takes for a program invoked as
// program with args: `run` first when the program is kube-proxy.
func ArgsFor(program string, args []string) []string {
	if filepath.Base(program) == KubeProxyName {
		return append([]string{"run"}, args...)
	}
	return args
}

// Main runs ipvs-proxy with args (without the program name) and returns the
// exit status. On error it prints one line to stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	// One line: joined errors (several invalid settings) are separated by "; ".
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	if strings.HasPrefix(msg, "unknown command") && len(args) > 0 {
		if s := root.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
	}
	fmt.Fprintf(stderr, "ipvs-proxy: %s\n", msg)
	return exitCode(err)
}
