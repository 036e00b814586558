package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/ipvs-proxy/ipvs-proxy/internal/version"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printVersion(cmd.OutOrStdout())
		},
	}
}

// versionLine is what `version`, `--version` and `run --version` print.
func versionLine() string {
	return fmt.Sprintf("ipvs-proxy %s (%s %s/%s)", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func printVersion(w io.Writer) error {
	_, err := fmt.Fprintln(w, versionLine())
	return failure(err)
}
