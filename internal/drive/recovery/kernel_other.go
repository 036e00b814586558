//go:build !linux

package recovery

import (
	"errors"
	"net/netip"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// ErrNeedsLinux: recover and cleanup read and change a Linux node's kernel.
var ErrNeedsLinux = errors.New("needs Linux: IPVS, kube-ipvs0 and ipsets are Linux kernel state")

// Kernel is the kernel of a node; there is none off Linux.
type Kernel struct{}

// OpenKernel fails with ErrNeedsLinux.
func OpenKernel() (*Kernel, error) { return nil, ErrNeedsLinux }

// Close does nothing.
func (k *Kernel) Close() {}

// Link is nil.
func (k *Kernel) Link() addrmgr.Link { return nil }

// Table is nil.
func (k *Kernel) Table() ipvs.Table { return nil }

// Read fails with ErrNeedsLinux.
func (k *Kernel) Read() (*Node, error) { return nil, ErrNeedsLinux }

// RetireSources fails with ErrNeedsLinux.
func (k *Kernel) RetireSources(map[netip.Prefix]netip.Addr) error { return ErrNeedsLinux }

// OpenConnsFrom fails with ErrNeedsLinux.
func (k *Kernel) OpenConnsFrom([]netip.Addr) (int, error) { return 0, ErrNeedsLinux }

// DeleteDevice fails with ErrNeedsLinux.
func (k *Kernel) DeleteDevice() error { return ErrNeedsLinux }

func openRules(*zap.Logger) (*iptables.Syncer, error) { return nil, ErrNeedsLinux }
