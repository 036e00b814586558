//go:build !linux

package main

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
)

// runDaemon fails off Linux: `run` programs IPVS, kube-ipvs0, ipsets and
// iptables, which only a Linux kernel has. `plan` works anywhere.
func runDaemon(context.Context, *config.Config, *zap.Logger) error {
	return errors.New("run needs Linux: it programs IPVS, kube-ipvs0, ipsets and iptables; plan works on any system")
}

func initOnly(context.Context, *config.Config, *zap.Logger) error {
	return errors.New("--init-only: ipvs-proxy runs on Linux only")
}
