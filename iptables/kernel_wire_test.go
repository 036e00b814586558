//go:build kernel

package iptables_test

import (
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
)

func init() { iptables.OpenKernel = kernel.NewSyncer }
