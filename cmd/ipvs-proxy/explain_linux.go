package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/explain"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
)

// kernelReader reads one Service's keys from this network namespace's
// kernel: each virtual server by its key, each ipset entry by a test,
// kube-ipvs0's addresses once, one iptables-save per family.
type kernelReader struct {
	table *ipvskernel.Table // nil when ip_vs is not loaded: no virtual server
	sets  *iptableskernel.Sets
	bound map[netip.Addr]bool
}

var _ explain.Reader = (*kernelReader)(nil)

// compareKernel compares x with the kernel of this network namespace.
func compareKernel(x *explain.Explanation) error {
	r := &kernelReader{bound: map[netip.Addr]bool{}}
	var err error
	// Opening the table would load ip_vs: a node without it has no
	// virtual server.
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		if r.table, err = ipvskernel.Open(); err != nil {
			return err
		}
		defer r.table.Close()
	}
	if r.sets, err = iptableskernel.OpenSets(); err != nil {
		return err
	}
	defer r.sets.Close()
	link, err := netlink.LinkByName(addrmgr.Device)
	switch {
	case errors.As(err, new(netlink.LinkNotFoundError)):
	case err != nil:
		return fmt.Errorf("ip link show %s: %w", addrmgr.Device, err)
	default:
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("ip addr show dev %s: %w", addrmgr.Device, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				r.bound[ip.Unmap()] = true
			}
		}
	}
	return x.Compare(r)
}

func (r *kernelReader) VirtualServer(k ipvs.Key) (*ipvs.VirtualServer, error) {
	if r.table == nil {
		return nil, nil
	}
	return r.table.Service(k)
}

func (r *kernelReader) Bound(a netip.Addr) (bool, error) { return r.bound[a], nil }

// Save is one iptables-save (ip6tables-save) of family, every table.
func (r *kernelReader) Save(family string) (string, error) {
	run, err := iptableskernel.NewRunner(family)
	if err != nil {
		return "", err
	}
	return run.Save()
}

func (r *kernelReader) Member(s iptables.IPSet, e iptables.Entry) (bool, error) {
	ok, err := r.sets.Test(s, e)
	if errors.Is(err, iptables.ErrSetNotFound) {
		return false, nil
	}
	return ok, err
}
