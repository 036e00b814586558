package recovery

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// ErrCleanup is wrapped by every failure of Cleanup.
var ErrCleanup = errors.New("cleanup failed")

// CleanupOptions configure Cleanup.
type CleanupOptions struct {
	// ExcludeCIDRs is --ipvs-exclude-cidrs: virtual servers there stay.
	ExcludeCIDRs []netip.Prefix
	// NodePortRange is --service-node-port-range; zero is 30000-32767.
	NodePortRange model.PortRange
	// StateDir is --state-dir: its ownership journal (ipvs.JournalFile)
	// names virtual servers the kernel does not show to be ours (an
	// externalIP on a node address served at L4); they are deleted too and
	// the journal removed. "" reads no journal.
	StateDir string
	// Rules cleans the chains and ipsets; nil opens iptables/kernel.NewSyncer in
	// the calling thread's namespace. Tests pass a fake.
	Rules interface {
		Cleanup(d iptables.Desired) (*iptables.Result, error)
	}
	// KubeProxyMode is the mode kube-proxy serves this node in while the
	// proxy's leftovers go (the way out): "iptables" keeps the chains that
	// mode writes under the proxy's names (iptables.IPTablesModeShared) and
	// the jumps to them; "" and "nftables" remove every chain of the plan.
	KubeProxyMode string
	// Drain is, with KubeProxyMode set, how long this node's own
	// connections from kube-ipvs0's addresses are waited for before it
	// goes (drainSources); 0 is DefaultDrain, negative no wait.
	Drain time.Duration
	// Log receives what was removed; nil means no logging.
	Log *zap.Logger
}

// CleanupResult is what Cleanup removed.
type CleanupResult struct {
	// VirtualServers are the deleted virtual servers.
	VirtualServersDeleted int
	// AddressesDeleted counts the addresses kube-ipvs0 held.
	AddressesDeleted int
	// DeviceDeleted is true when kube-ipvs0 was there and is gone.
	DeviceDeleted bool
	// Families are the families whose chains and ipsets were cleaned.
	Families []string
	// StillOpen are this node's connections from kube-ipvs0's addresses
	// the drain's wait left open (they ended with it).
	StillOpen int
}

// Cleanup takes the proxy off the node in the calling thread's network
// namespace, removing what the proxy created and nothing else, in an order
// that a second run can finish after a failure:
//
//  1. the virtual servers ipvs.Ownership calls ours — on an address bound on
//     kube-ipvs0, NodePort servers (a node address, a port in the NodePort
//     range), and those in the ownership journal under StateDir — through
//     the reconciler with nothing desired; foreign ones
//     (keepalived's on a node address outside the NodePort range, kube-vip's
//     on an address not on kube-ipvs0) and those in ExcludeCIDRs stay;
//  2. kube-ipvs0 with its addresses (`ip link del kube-ipvs0`), only when
//     step 1 fully succeeded (its addresses are what marks step 1's servers
//     as ours); with KubeProxyMode set, after the drain (drainSources);
//  3. the proxy's chains, its jump rules in the built-in chains and its
//     ipsets, as named in the plan of an empty cluster, for both families.
//
// It never loads ip_vs and never creates anything. A second Cleanup finds
// nothing and changes nothing.
func Cleanup(o CleanupOptions) (*CleanupResult, error) {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	k, err := OpenKernel()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCleanup, err)
	}
	defer k.Close()
	node, err := k.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCleanup, err)
	}
	res := &CleanupResult{AddressesDeleted: len(node.Bound)}
	var errs []error

	ipvsOK := true
	if t := k.Table(); t != nil {
		var ipvsErrs []error
		res.VirtualServersDeleted, ipvsOK, ipvsErrs = cleanupIPVS(t, node, o, log)
		errs = append(errs, ipvsErrs...)
	}

	if node.HasDevice {
		switch {
		case !ipvsOK:
			errs = append(errs, fmt.Errorf("%w: %s kept: its addresses mark the virtual servers that could not be deleted as ours; run cleanup again", ErrCleanup, addrmgr.Device))
			res.AddressesDeleted = 0
		default:
			if o.KubeProxyMode != "" {
				drain := cmp.Or(o.Drain, DefaultDrain)
				open, err := drainSources(k, node, drain, log)
				if err != nil {
					log.Warn("draining this node's connections from kube-ipvs0's addresses", zap.Error(err))
				}
				res.StillOpen = open
			}
			if err := k.DeleteDevice(); err != nil {
				errs = append(errs, fmt.Errorf("%w: %w", ErrCleanup, err))
				res.AddressesDeleted = 0
			} else {
				res.DeviceDeleted = true
				log.Info("deleted device", zap.String("device", addrmgr.Device), zap.Int("addresses", len(node.Bound)))
			}
		}
	}

	errs = append(errs, cleanupRules(o, res, log)...)
	return res, errors.Join(errs...)
}

// cleanupIPVS deletes every virtual server the ownership rule or the
// journal calls ours; ok is false when one could not be deleted (then
// kube-ipvs0, whose addresses mark them as ours, must stay).
func cleanupIPVS(t ipvs.Table, node *Node, o CleanupOptions, log *zap.Logger) (deleted int, ok bool, errs []error) {
	ok = true
	own := ipvs.Ownership{NodeAddrs: slices.Concat(node.LocalAddrs(), node.LinkLocalAddrs)}
	for _, p := range node.Bound {
		own.BoundAddrs = append(own.BoundAddrs, p.Addr())
	}
	opts := ipvs.Options{ExcludeCIDRs: o.ExcludeCIDRs, NodePortRange: o.NodePortRange, Log: log}
	if o.StateDir != "" {
		opts.Journal = ipvs.NewFileJournal(o.StateDir)
	}
	r := ipvs.NewReconciler(t, opts)
	ir, err := r.Cleanup(ipvs.Desired{Own: own})
	switch {
	case err != nil:
		ok = false
		errs = append(errs, fmt.Errorf("%w: ipvsadm -S -n: %w", ErrCleanup, err))
	default:
		deleted = ir.ServicesDeleted
		if err := ir.Err(); err != nil {
			ok = false
			errs = append(errs, fmt.Errorf("%w: %w", ErrCleanup, err))
		}
		// Keeps in the journal only what could not be deleted.
		if err := r.Settle(own.Coverage()); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrCleanup, err))
		}
	}
	return deleted, ok, errs
}

// cleanupErr is a cleanup's error and the causes of its failures, as one
// error (the caller names the part).
func cleanupErr(res *iptables.Result, err error) error {
	if err != nil {
		return err
	}
	errs := make([]error, 0, len(res.Failures))
	for _, f := range res.Failures {
		errs = append(errs, f.Err)
	}
	return errors.Join(errs...)
}

// cleanupRules removes the proxy's ipsets and iptables chains and rules in
// both families, and records the families in res.
func cleanupRules(o CleanupOptions, res *CleanupResult, log *zap.Logger) []error {
	var errs []error
	rules := o.Rules
	if rules == nil {
		a, err := openRules(log)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: ipsets: %w", ErrCleanup, err))
		} else {
			defer a.Close()
			rules = a
		}
	}
	if rules != nil {
		sets, rulesets := emptyPlan()
		if o.KubeProxyMode == "iptables" {
			rulesets = iptables.WithoutChains(rulesets, iptables.IPTablesModeShared)
		}
		if err := cleanupErr(rules.Cleanup(iptables.Desired{Sets: sets, Rules: rulesets})); err != nil {
			errs = append(errs, fmt.Errorf("%w: iptables and ipsets: %w", ErrCleanup, err))
		} else {
			for _, rs := range rulesets {
				res.Families = append(res.Families, rs.Family)
			}
		}
		// The table of --strict-arp-vips, whether or not this run has it.
		if ar, ok := rules.(interface{ CleanupARP() error }); ok {
			if err := ar.CleanupARP(); err != nil {
				errs = append(errs, fmt.Errorf("%w: %w", ErrCleanup, err))
			}
		}
	}
	return errs
}

// emptyPlan is the plan of a cluster without services, for both families:
// every set and chain the proxy may have made.
func emptyPlan() ([]iptables.IPSet, []iptables.Ruleset) {
	st := planner.Plan(model.Cluster{}, planner.Options{
		LocalAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
	})
	return st.IPSets, st.Rulesets
}
