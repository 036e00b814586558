package ipvs

import (
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
)

// DefaultGracefulPeriod is how long a removed TCP real server may keep
// connections at weight 0 before it is deleted anyway (kube-proxy's 15m).
const DefaultGracefulPeriod = 15 * time.Minute

// wholeReadShare: the graceful queue reads the whole table's counters
// (/proc/net/ip_vs) instead of one dump per waiting virtual server only when
// at least one owned virtual server in this many waits. The whole read costs
// every real server of the node; an endpoint removed from one Service among
// 20,000 must cost that Service's dumps (one per port and address), not the
// 200,000 lines of the listing.
const wholeReadShare = 8

type graceKey struct {
	Key
	Addr netip.Addr
	Port uint16
}

// processGrace deletes quiesced TCP real servers whose connections are gone
// or whose graceful period is over. Real servers queued during this sync
// (at or after start) are left for the next one, so a sync that only
// quiesces reads nothing; otherwise it reads the counters of each virtual
// server with queued real servers: one read of the whole table when the
// Table is a CounterReader and waiting virtual servers are a share of the
// table (wholeReadShare), else one IPVS_CMD_GET_DEST dump of each.
func (r *Reconciler) processGrace(start time.Time, res *Result) {
	if len(r.grace) == 0 {
		return
	}
	now := r.opts.Clock.Now()
	byVS := make(map[Key][]graceKey)
	for g, since := range r.grace {
		if !since.Before(start) {
			continue
		}
		byVS[g.Key] = append(byVS[g.Key], g)
	}
	keys := make([]Key, 0, len(byVS))
	for k := range byVS {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, CompareKeys)
	all := r.allCounters(byVS, now)
	for _, k := range keys {
		m := r.mirror[k]
		if m == nil {
			for _, g := range byVS[k] {
				delete(r.grace, g)
			}
			continue
		}
		var counts map[netip.AddrPort]int
		expired := true
		for _, g := range byVS[k] {
			if now.Sub(r.grace[g]) < r.opts.GracefulPeriod {
				expired = false
			}
		}
		if !expired {
			st, ok := all[k]
			if all == nil || !ok {
				var err error
				if st, err = r.t.RealServers(k); err != nil {
					res.fail(m.service, k, err)
					continue
				}
			}
			counts = make(map[netip.AddrPort]int, len(st))
			for _, s := range st {
				counts[netip.AddrPortFrom(s.Address, s.Port)] = s.ActiveConns + s.InactiveConns
			}
		}
		for _, g := range byVS[k] {
			i := m.findRS(g.Addr, g.Port)
			if i < 0 {
				delete(r.grace, g)
				continue
			}
			if now.Sub(r.grace[g]) < r.opts.GracefulPeriod {
				n, ok := counts[netip.AddrPortFrom(g.Addr, g.Port)]
				if !ok {
					// Gone from the kernel already: the mirror learns
					// it, which a read under way may not have seen.
					r.wrote(k)
					m.ownRS()
					m.vs.RealServers = slices.Delete(m.vs.RealServers, i, i+1)
					delete(r.grace, g)
					continue
				}
				if n > 0 {
					continue
				}
			}
			r.log.Debug("graceful termination over", zap.Stringer("virtualServer", k), zap.Stringer("realServer", netip.AddrPortFrom(g.Addr, g.Port)))
			r.deleteRS(m, i, res)
		}
	}
}

// allCounters reads the counters of every real server at once when the
// virtual servers byVS needs counted are many (more than one, and at least
// one in wholeReadShare of the owned ones): one read of the whole table
// rather than one dump per virtual server. nil means: read each one alone.
func (r *Reconciler) allCounters(byVS map[Key][]graceKey, now time.Time) map[Key][]RealServerStatus {
	cr, ok := r.t.(CounterReader)
	if !ok {
		return nil
	}
	if n := r.needCounts(byVS, now); n <= 1 || n*wholeReadShare < len(r.mirror) {
		return nil
	}
	all, err := cr.AllRealServers()
	if err != nil {
		r.log.Debug("reading all IPVS counters at once failed, reading per virtual server", zap.Error(err))
		return nil
	}
	return all
}

// needCounts is how many virtual servers of byVS have a queued real server
// still within its graceful period (their counters must be read).
func (r *Reconciler) needCounts(byVS map[Key][]graceKey, now time.Time) int {
	n := 0
	for k, gs := range byVS {
		if r.mirror[k] == nil {
			continue
		}
		for _, g := range gs {
			if now.Sub(r.grace[g]) < r.opts.GracefulPeriod {
				n++
				break
			}
		}
	}
	return n
}
