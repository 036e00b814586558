package ipvs

import (
	"net/netip"
	"slices"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Counters are a virtual server's traffic counters as the kernel keeps
// them from its creation (struct ip_vs_kstats, `ipvsadm -L -n --stats`):
// connections scheduled, and packets and bytes in (client to real server)
// and out (the replies).
type Counters struct {
	Connections           uint64
	InPackets, OutPackets uint64
	InBytes, OutBytes     uint64
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	c.Connections += o.Connections
	c.InPackets += o.InPackets
	c.OutPackets += o.OutPackets
	c.InBytes += o.InBytes
	c.OutBytes += o.OutBytes
}

// Conns are a real server's connection entries, or the sum over a virtual
// server's: `ipvsadm -L -n`'s ActiveConn and InActConn.
type Conns struct{ Active, Inactive uint64 }

// Add adds o to c.
func (c *Conns) Add(o Conns) {
	c.Active += o.Active
	c.Inactive += o.Inactive
}

// RealServerConns are one real server's connection entries.
type RealServerConns struct {
	Address netip.Addr
	Port    uint16
	Conns
}

// Stats are one virtual server's counters as a full sync's read found
// them.
type Stats struct {
	Key
	Counters
	// Conns are summed over the real servers.
	Conns
	// RealServers are each real server's, only when
	// StatsOptions.RealServers asks for them.
	RealServers []RealServerConns
}

// StatsWalker is a Walker that gives each virtual server's counters with
// it, from the same read: the kernel's, where the virtual servers' dump
// carries the counters and the /proc listing each real server's
// connections.
type StatsWalker interface {
	// EachServiceStats is EachService with vs's counters and, in conns,
	// the connections of each of vs.RealServers in the same order; all
	// are valid only during the call.
	EachServiceStats(fn func(vs *VirtualServer, c *Counters, conns []Conns)) error
}

// ServiceStats are the counters of one desired virtual server, with the
// service port and address kind that asked for it.
type ServiceStats struct {
	Service model.ServicePortName
	Kind    model.AddressKind
	Counters
	Conns
	// RealServers as in Stats.
	RealServers []RealServerConns
}

// StatsSnapshot is what one full sync's read found of the desired virtual
// servers' counters.
type StatsSnapshot struct {
	// Read is when the read ended.
	Read time.Time
	// Services are the desired virtual servers' counters, in key order;
	// a virtual server the read did not find has none.
	Services []ServiceStats
}

// StatsOptions make a Reconciler keep the counters its full syncs read
// (the per-Service statistics): with Publish set, every full sync's read
// keeps each virtual server's counters (Dump.Stats) from the table's
// StatsWalker, and the sync hands those of its desired virtual servers to
// Publish, on the reconciler's goroutine. No read is made for them: a
// table that is no StatsWalker gives none.
type StatsOptions struct {
	// Publish receives each snapshot; nil keeps no counters.
	Publish func(*StatsSnapshot)
	// RealServers keeps each real server's connections too.
	RealServers bool
}

// statsRead collects a read's counters (Dump.Stats) when the table gives
// them and they are asked for.
type statsRead struct {
	w           StatsWalker
	realServers bool
}

// statsReader is the read of t's counters the options ask for, or nil.
func (o StatsOptions) statsReader(t Table) *statsRead {
	if o.Publish == nil {
		return nil
	}
	w, ok := t.(StatsWalker)
	if !ok {
		return nil
	}
	return &statsRead{w: w, realServers: o.RealServers}
}

// walk walks the table as Walker does, appending each virtual server's
// counters to d.Stats.
func (s *statsRead) walk(d *Dump, visit func(*VirtualServer)) error {
	return s.w.EachServiceStats(func(vs *VirtualServer, c *Counters, conns []Conns) {
		st := Stats{Key: vs.Key, Counters: *c}
		for i := range conns {
			st.Conns.Add(conns[i])
		}
		if s.realServers && len(conns) > 0 {
			st.RealServers = make([]RealServerConns, len(conns))
			for i := range conns {
				rs := &vs.RealServers[i]
				st.RealServers[i] = RealServerConns{Address: rs.Address, Port: rs.Port, Conns: conns[i]}
			}
		}
		d.Stats = append(d.Stats, st)
		visit(vs)
	})
}

// labelStats pairs the read's counters (sorted by key) with the desired
// virtual servers (sorted by key, as a planner's state is; sorted here
// otherwise) that carry their service port and kind, in one merge.
func labelStats(stats []Stats, desired []VirtualServer, read time.Time) *StatsSnapshot {
	cmp := func(a, b VirtualServer) int { return CompareKeys(a.Key, b.Key) }
	if !slices.IsSortedFunc(desired, cmp) {
		desired = slices.SortedFunc(slices.Values(desired), cmp)
	}
	snap := &StatsSnapshot{Read: read, Services: make([]ServiceStats, 0, min(len(stats), len(desired)))}
	i, j := 0, 0
	for i < len(stats) && j < len(desired) {
		switch c := CompareKeys(stats[i].Key, desired[j].Key); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			if d := &desired[j]; !d.Service.IsZero() {
				s := &stats[i]
				snap.Services = append(snap.Services, ServiceStats{Service: d.Service, Kind: d.Kind,
					Counters: s.Counters, Conns: s.Conns, RealServers: s.RealServers})
			}
			i++
			j++
		}
	}
	return snap
}

// SetStats sets Options.Stats: from the next full sync's read on, the
// counters are kept as o says.
func (r *Reconciler) SetStats(o StatsOptions) { r.opts.Stats = o }
