//go:build kernel

package iptables_test

// counted is iptables/kernel.Runner's view of what it ran.
type counted interface {
	Execs() int64
	Restores() int64
}
