// Package recovery finds and strips bad addresses on kube-ipvs0 — a node's
// address, a gateway, the API server, anything the node-IP guard protects,
// and addresses no current Service wants — together with the IPVS virtual
// servers on them (`ipvs-proxy recover`), and takes the proxy off a node
// (`ipvs-proxy cleanup`).
//
// What is bad and why (Find) is pure and table-tested; reading the node
// (ReadNode), the API server (ReadCluster) and /proc (FindProxies) and
// changing the kernel (Apply, Cleanup) are thin layers around it. It owns
// no state of its own. It never touches an interface other than kube-ipvs0,
// a virtual server on an address that stays local (the node's own: NodePort
// or foreign servers), nor anything inside the excluded CIDRs; Cleanup
// touches only what the ownership rules (ipvs.Ownership) say is the proxy's.
package recovery

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Reasons for an address that the guard allows but is bad anyway.
const (
	// ReasonNotWanted: the API server answered and no current Service wants
	// the address bound (a leftover of a deleted Service or another proxy).
	ReasonNotWanted model.Reason = "NotWanted"
	// ReasonNoVirtualServer: with --stale and no API server, an address with
	// no IPVS virtual server on it serves nothing.
	ReasonNoVirtualServer model.Reason = "NoVirtualServer"
	// ReasonNotHostPrefix: every address the proxy binds is a /32 or /128;
	// a wider prefix on kube-ipvs0 makes a whole subnet local.
	ReasonNotHostPrefix model.Reason = "NotHostPrefix"
)

// ErrRemove is wrapped by every failure to remove an address or a virtual
// server.
var ErrRemove = errors.New("recovery: remove failed")

// Facts is everything Find looks at: the node's kernel state and what is
// known about the cluster. Only Bound is required.
type Facts struct {
	// Bound are kube-ipvs0's addresses (`ip -o addr show dev kube-ipvs0`).
	Bound []netip.Prefix
	// VirtualServers is the node's IPVS table (`ipvsadm -S -n`).
	VirtualServers []ipvs.VirtualServer
	// Guard is the node-IP guard built from the node's interfaces, the
	// cached and live Node addresses, the gateways, the API server
	// addresses, --protected-cidrs and --cluster-cidr. nil protects only
	// the never-a-VIP classes.
	Guard *guard.Guard
	// Wanted are the kube-ipvs0 addresses the current Services want (the
	// plan's Addresses); meaningful only when WantedKnown.
	Wanted []netip.Prefix
	// WantedKnown is true when the API server answered and Wanted is the
	// full list.
	WantedKnown bool
	// Stale (--stale) treats, when Wanted is unknown, an address with no
	// virtual server on it as not wanted.
	Stale bool
	// ExcludeCIDRs (--ipvs-exclude-cidrs): virtual servers inside are never
	// removed, and a /32 or /128 inside is removed only when the guard
	// protects it (not when no Service wants it).
	ExcludeCIDRs []netip.Prefix
}

// Finding is one bad address on kube-ipvs0 and what goes with it.
type Finding struct {
	// Address is the prefix as bound on kube-ipvs0.
	Address netip.Prefix `json:"address"`
	// Reason is the guard's reason code (NodeIP, LocalAddress, Gateway, ...)
	// or one of this package's (NotWanted, NoVirtualServer, NotHostPrefix).
	Reason model.Reason `json:"reason"`
	// Detail says why in words ("address of node b; ...").
	Detail string `json:"detail"`
	// VirtualServers are the IPVS virtual servers on the address removed
	// with it, sorted. Empty when the address is one of this node's own:
	// it stays local after the unbind, so its virtual servers (NodePorts,
	// foreign ones) stay too.
	VirtualServers []ipvs.Key `json:"-"`
	// Kept are the virtual servers on the address that stay, and why, as
	// text; for the report only.
	Kept string `json:"kept,omitempty"`
}

// Find lists the bad addresses on kube-ipvs0, sorted by address: every
// address the guard refuses, every prefix that is not a /32 or /128, and —
// when the Services are known, or with Stale — every address no Service
// wants, but for those inside ExcludeCIDRs. It is pure and deterministic.
func Find(f Facts) []Finding {
	g := f.Guard
	if g == nil {
		g = guard.New(guard.Inputs{})
	}
	wanted := make(map[netip.Addr]bool, len(f.Wanted))
	for _, p := range f.Wanted {
		wanted[p.Addr()] = true
	}
	byAddr := make(map[netip.Addr][]ipvs.Key)
	for _, vs := range f.VirtualServers {
		a := vs.Address
		byAddr[a] = append(byAddr[a], vs.Key)
	}
	var out []Finding
	bound := slices.Clone(f.Bound)
	slices.SortFunc(bound, model.ComparePrefix)
	bound = slices.Compact(bound)
	for _, p := range bound {
		a := p.Addr()
		v := g.Check(a)
		reason, detail := v.Reason, v.Detail
		switch {
		case v.Protected:
		case p.Bits() != p.Addr().BitLen():
			reason, detail = ReasonNotHostPrefix, fmt.Sprintf("a /%d on kube-ipvs0 makes the whole subnet %s local; the proxy binds only host prefixes", p.Bits(), p.Masked())
		case excluded(f.ExcludeCIDRs, a):
			// Not the proxy's: run leaves it too (addrmgr.SetExclude).
			continue
		case f.WantedKnown && !wanted[a]:
			reason, detail = ReasonNotWanted, "no current Service wants this address"
		case !f.WantedKnown && f.Stale && len(byAddr[a]) == 0:
			reason, detail = ReasonNoVirtualServer, "no IPVS virtual server on this address (--stale)"
		default:
			continue
		}
		fd := Finding{Address: p, Reason: reason, Detail: detail}
		var keys []ipvs.Key
		if !excluded(f.ExcludeCIDRs, a) {
			keys = slices.Clone(byAddr[a])
		}
		slices.SortFunc(keys, ipvs.CompareKeys)
		switch {
		case len(byAddr[a]) == 0:
		case v.Local:
			fd.Kept = "the address stays on another interface of this node; its virtual servers stay"
		case len(keys) < len(byAddr[a]):
			fd.Kept = "virtual servers inside --ipvs-exclude-cidrs stay"
			fd.VirtualServers = keys
		default:
			fd.VirtualServers = keys
		}
		out = append(out, fd)
	}
	return out
}

func excluded(cidrs []netip.Prefix, a netip.Addr) bool {
	for _, p := range cidrs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Result is what Apply removed and what it could not.
type Result struct {
	// Unbound are the addresses removed from kube-ipvs0.
	Unbound []netip.Prefix
	// Deleted are the virtual servers deleted.
	Deleted []ipvs.Key
	// Errors are the failures, each wrapping ErrRemove.
	Errors []error
}

// Err joins the failures, or is nil (also for a nil Result).
func (r *Result) Err() error {
	if r == nil {
		return nil
	}
	return errors.Join(r.Errors...)
}

// Apply removes each finding's address from kube-ipvs0 (`ip addr del
// ADDR dev kube-ipvs0`), then its virtual servers (`ipvsadm -D`), in the
// findings' order, and nothing else. An address or virtual server already
// gone counts as removed. It goes on after a failure. table may be nil when
// the node has no IPVS.
func Apply(link addrmgr.Link, table ipvs.Table, findings []Finding) *Result {
	res := &Result{}
	for _, fd := range findings {
		if err := link.DelAddr(fd.Address); err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("%w: ip addr del %s dev %s: %w", ErrRemove, fd.Address, addrmgr.Device, err))
		} else {
			res.Unbound = append(res.Unbound, fd.Address)
		}
		for _, k := range fd.VirtualServers {
			if table == nil {
				break
			}
			err := table.DelService(k)
			if err != nil && !errors.Is(err, ipvs.ErrNotFound) {
				res.Errors = append(res.Errors, fmt.Errorf("%w: ipvsadm -D %s: %w", ErrRemove, k, err))
				continue
			}
			res.Deleted = append(res.Deleted, k)
		}
	}
	return res
}
