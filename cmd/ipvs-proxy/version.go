package main

import (
	"fmt"
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
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "ipvs-proxy %s (%s %s/%s)\n",
				version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return failure(err)
		},
	}
}
