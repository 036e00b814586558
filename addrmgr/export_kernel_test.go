//go:build kernel

package addrmgr

import "github.com/vishvananda/netlink"

// NetlinkLink is the device a KernelLink writes to, for the kernel tests.
func (l *KernelLink) NetlinkLink() netlink.Link { return l.link }
