package daemon

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/internal/metrics"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
)

// kernel is the real data-plane stack of this network namespace.
type kernel struct {
	table *ipvskernel.Table
	// reader is a second IPVS socket, for the periodic full sync's read
	// beside the loop (Readbacker): a netlink socket serves one request
	// at a time.
	reader *ipvskernel.Table
	// setReader is a second ipset socket, for the same read.
	setReader *iptableskernel.Sets
	ct        *ipvskernel.Conntrack
	nl        *netlink.Handle
	// addrReader is a second rtnetlink socket, for the same read's dump
	// of kube-ipvs0.
	addrReader *nlconn.AddrDumper
	// addrWriter is a third rtnetlink socket, the binds' (many to a
	// sendmsg).
	addrWriter *nlconn.Writer
	link       *addrkernel.Link
	rules      *iptables.Syncer
	guard      *guardInForce
	rec        *ipvs.Reconciler
	app        *applier.Applier
	// addrKick receives (coalesced, never blocking the sender) when the
	// address manager's watch of kube-ipvs0 saw an address added or
	// removed by someone else, or lost events: a sync should run soon
	// (a partial one with no changed service is enough; it dumps
	// kube-ipvs0 and repairs it). stopWatch ends the watch.
	addrKick  chan struct{}
	stopWatch context.CancelFunc
	// env caches the node's own addresses between syncs; envNL is its
	// netlink handle (strict checking on).
	env   *nodeenv.Cache
	envNL *nodeenv.Handle
}

func openKernel(c *config.Config, log *zap.Logger) (*kernel, error) {
	k := &kernel{guard: newGuardInForce(nil), addrKick: make(chan struct{}, 1)}
	var err error
	if k.table, err = ipvskernel.Open(); err != nil {
		return nil, fmt.Errorf("open IPVS: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			k.close()
		}
	}()
	if err := setSysctls(c, log); err != nil {
		return nil, err
	}
	if c.IPVSTCPTimeout > 0 || c.IPVSTCPFinTimeout > 0 || c.IPVSUDPTimeout > 0 {
		if err := k.table.SetTimeouts(c.IPVSTCPTimeout, c.IPVSTCPFinTimeout, c.IPVSUDPTimeout); err != nil {
			return nil, fmt.Errorf("ipvsadm --set: %w", err)
		}
	}
	if k.reader, err = ipvskernel.Open(); err != nil {
		return nil, fmt.Errorf("open a second IPVS socket: %w", err)
	}
	if k.ct, err = ipvskernel.OpenConntrack(); err != nil {
		return nil, fmt.Errorf("open conntrack: %w", err)
	}
	if k.nl, err = netlink.NewHandle(); err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	link, err := addrkernel.EnsureDevice(k.nl)
	if err != nil {
		return nil, err
	}
	k.link = link
	if k.addrWriter, err = nlconn.OpenWriter(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("netlink: a socket for the binds: %w", err)
	}
	link.SetWriter(k.addrWriter)
	if k.rules, err = iptableskernel.NewSyncer(log.Named("iptables")); err != nil {
		return nil, fmt.Errorf("ipsets: %w", err)
	}
	if k.setReader, err = iptableskernel.OpenSets(); err != nil {
		return nil, fmt.Errorf("open a second ipset socket: %w", err)
	}
	k.rules.Reader = k.setReader
	if k.rules.ARPVIPs = c.StrictARPVIPs; c.StrictARPVIPs && k.rules.NFT == nil {
		return nil, fmt.Errorf("--strict-arp-vips: %w", iptables.ErrNoARPKernel)
	}
	rec := ipvs.NewReconciler(k.table, ipvs.Options{
		GracefulPeriod: c.IPVSGracefulPeriod,
		ExcludeCIDRs:   c.Planning.ExcludeCIDRs,
		Conntrack:      k.ct,
		Journal:        ipvs.NewFileJournal(c.StateDir),
		Reader:         k.reader,
		Log:            log.Named("ipvs"),
	})
	if k.addrReader, err = nlconn.OpenAddrDumper(); err != nil {
		return nil, fmt.Errorf("netlink: a second socket: %w", err)
	}
	mgr := addrmgr.NewManager(link, k.guard, log.Named("addrmgr"))
	mgr.SetExclude(c.Planning.ExcludeCIDRs)
	mgr.SetReader(link.Reader(k.addrReader))
	if err := k.watch(mgr, link, log); err != nil {
		return nil, err
	}
	k.rec = rec
	k.app = applier.New(rec, mgr, k.rules, log.Named("applier"))
	ok = true
	return k, nil
}

// setSysctls writes the kernel settings IPVS needs and conntrack's table
// size and timeouts, as kube-proxy sets them at every start (the kernel's
// defaults return after a reboot), and logs each one it changed.
func setSysctls(c *config.Config, log *zap.Logger) error {
	rel, err := ipvskernel.Release()
	if err != nil {
		return err
	}
	changed, err := ipvskernel.WriteSysctls("/proc/sys", ipvs.KernelSysctls(rel, c.IPVSStrictARP))
	if noIPVS("/proc/sys", err) {
		return ErrNoIPVS
	}
	if err != nil {
		return fmt.Errorf("sysctls: %w", err)
	}
	// conntrack's table size and timeouts, as kube-proxy sets them at
	// every start (the kernel's defaults return after a reboot).
	changed = append(changed, setConntrack(c.KubeProxy.Conntrack, nodeCPUs(), "/proc/sys", conntrackHashsizeFile, log)...)
	for _, s := range changed {
		log.Info("set sysctl", zap.String("name", s.Name), zap.Int("value", s.Value))
	}
	return nil
}

// watch follows kube-ipvs0's addresses (`ip monitor address dev
// kube-ipvs0`), the node's other links and its main routing table for the
// node-address cache.
func (k *kernel) watch(mgr *addrmgr.Manager, link *addrkernel.Link, log *zap.Logger) error {
	// `ip monitor address dev kube-ipvs0`: partial syncs then dump
	// kube-ipvs0 only after a change by others (or lost events). Without
	// the watch every sync dumps it, as before.
	var watchCtx context.Context
	watchCtx, k.stopWatch = context.WithCancel(context.Background())
	// With strict checking the kernel dumps the main routing table alone,
	// not the local table's route of every kube-ipvs0 address.
	var err error
	if k.envNL, err = nodeenv.NewHandle(); err != nil {
		return err
	}
	if !k.envNL.Strict {
		log.Warn("netlink strict checking unavailable: every sync reads the whole routing table")
	}
	k.env = nodeenv.NewCache(k.envNL)
	// `ip monitor route`: partial syncs then read the routes only after
	// the main table changed.
	if err := k.env.WatchRoutes(watchCtx, log.Named("nodeenv")); err != nil {
		log.Warn("not following the routes: every sync reads them", zap.Error(err))
	}
	// The same watch tells the node-address cache about the other links.
	link.OtherLinks = k.env.Changed
	if err := mgr.Watch(watchCtx, func() {
		select {
		case k.addrKick <- struct{}{}:
		default:
		}
	}); err != nil {
		log.Warn("not following "+addrmgr.Device+" addresses: every sync dumps them", zap.Error(err))
	}
	return nil
}

// reportRestoreFailures counts each sync whose iptables-restore failed in
// kube-proxy's series, under its ip_family label.
func (k *kernel) reportRestoreFailures(m *metrics.KubeProxy) {
	k.rules.OnRestoreFailure = func(family string) {
		if family == iptables.FamilyIPv6 {
			m.RestoreFailed("IPv6")
		} else {
			m.RestoreFailed("IPv4")
		}
	}
}

func (k *kernel) close() {
	if k.stopWatch != nil {
		k.stopWatch()
	}
	if k.rules != nil {
		k.rules.Close()
	}
	if k.nl != nil {
		k.nl.Close()
	}
	if k.envNL != nil {
		k.envNL.Close()
	}
	if k.ct != nil {
		k.ct.Close()
	}
	if k.table != nil {
		k.table.Close()
	}
	if k.reader != nil {
		k.reader.Close()
	}
	if k.setReader != nil {
		k.setReader.Close()
	}
	if k.addrReader != nil {
		k.addrReader.Close()
	}
	if k.addrWriter != nil {
		k.addrWriter.Close()
	}
}

// Full is a full sync: IPVS, kube-ipvs0, ipsets and chains read back and
// repaired.
func (k *kernel) Full(st *planner.State, nodeAddrs []netip.Addr) (*applier.Result, error) {
	return k.app.Full(st, nodeAddrs)
}

// BeginFull starts a periodic full sync whose reads of IPVS, kube-ipvs0,
// the ipsets and the tables run beside the loop (Readbacker).
func (k *kernel) BeginFull() func() (*applier.Readback, error) { return k.app.BeginFull() }

// FullFrom is Full with the IPVS table as BeginFull's read found it, in
// turns (applier.Turn).
func (k *kernel) FullFrom(st *planner.State, nodeAddrs []netip.Addr, rb *applier.Readback, turn applier.Turn) (*applier.Result, error) {
	return k.app.FullFrom(st, nodeAddrs, rb, turn)
}

var _ Readbacker = (*kernel)(nil)

// Partial is a partial sync: the changed services' virtual servers, found
// through idx, set entries against the mirror.
func (k *kernel) Partial(st *planner.State, idx applier.Index, changed ...types.NamespacedName) (*applier.Result, error) {
	return k.app.PartialIndexed(st, idx, changed...)
}
