//go:build !linux

package main

import (
	"errors"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/explain"
)

// compareKernel fails off Linux: only a Linux kernel has IPVS.
func compareKernel(*explain.Explanation) error {
	return errors.New("--kernel needs Linux: only a Linux kernel has IPVS; explain -f without it works on any system")
}
