//go:build kernel

package iptables

import "go.uber.org/zap"

// OpenKernel is iptables/kernel.NewSyncer, set by kernel_wire_test.go: a
// test of this package cannot import the package that imports it, but the
// package's external tests, compiled into the same binary, can.
var OpenKernel func(log *zap.Logger) (*Syncer, error)

// counted is iptables/kernel.Runner's view of what it ran.
type counted interface {
	Execs() int64
	Restores() int64
}
