//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/daemon"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/preflight"
)

// preflightTimeout bounds the API server's answer to --init-only: an API
// server that does not answer in it is named in a warning, not a failure
// (the node may start before the control plane answers).
const preflightTimeout = 5 * time.Second

// preflightRoot is the filesystem the IPVS check reads (/proc,
// /lib/modules); tests replace it.
var preflightRoot fs.FS = os.DirFS("/")

// initOnly is `run --init-only`: it says the node can be served only when
// the configuration file, the kubeconfig, the API server (when it answers)
// and the kernel agree.
func initOnly(ctx context.Context, c *config.Config, log *zap.Logger) error {
	if err := checkFile(c); err != nil {
		return err
	}
	restCfg, err := daemon.RESTConfig(c.Master, c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", c.Kubeconfig, err)
	}
	restCfg.Timeout = preflightTimeout
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", c.Kubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	switch err := preflight.CheckCredentials(ctx, client); {
	case errors.Is(err, preflight.ErrCredentialsRefused):
		return failure(fmt.Errorf("API server %s: %w", restCfg.Host, err))
	case err != nil:
		log.Warn("--init-only: the API server did not answer; its credentials are not checked", zap.String("server", restCfg.Host), zap.Error(err))
	}
	if err := (preflight.Kernel{Root: preflightRoot}).CheckIPVS(c.Planning.Scheduler); err != nil {
		return failure(err)
	}
	log.Info("--init-only: the configuration, the kubeconfig, the API server's answer and the kernel's IPVS are fit to run; ipvs-proxy has no privileged initialisation step, exiting")
	return nil
}
