package ipvs

import "errors"

// The creation path: new virtual servers, and the real servers a virtual
// server lacks, sent to the Table in batches (AddServices, AddRealServers),
// each outcome handled as the kernel reported it.

// created finishes d's creation after its `ipvsadm -A` returned err: one
// already there (someone else's, since the dump) is taken over with
// `ipvsadm -E`. It returns d's new mirror entry, without real servers;
// false when the kernel refused.
func (r *Reconciler) created(d *VirtualServer, err error, res *Result) (*mirrorVS, bool) {
	switch {
	case errors.Is(err, ErrExists):
		if err := r.t.UpdateService(*d); err != nil {
			res.fail(d.Service, d.Key, err)
			return nil, false
		}
		res.ServicesUpdated++
	case err != nil:
		res.fail(d.Service, d.Key, err)
		return nil, false
	default:
		res.ServicesAdded++
	}
	vs := *d
	// Filled as the real servers are added: a prefix of d's.
	vs.RealServers = nil
	m := &mirrorVS{vs: vs}
	r.mirror[d.Key] = m
	r.touched[d.Key] = true
	return m, true
}

// createAll creates every virtual server of desired the mirror lacks in
// one AddServices (a first sync's are all of them); it returns the keys the
// kernel refused, which the caller does not apply again in this sync.
func (r *Reconciler) createAll(desired []VirtualServer, res *Result) map[Key]bool {
	var idx []int
	for i := range desired {
		if d := &desired[i]; r.mirror[d.Key] == nil && !r.excluded(d.Address) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	vss := make([]VirtualServer, len(idx))
	for j, i := range idx {
		vss[j] = desired[i]
		r.wrote(vss[j].Key)
	}
	var refused map[Key]bool
	r.t.AddServices(vss, func(j int, err error) {
		if _, ok := r.created(&desired[idx[j]], err, res); !ok {
			if refused == nil {
				refused = map[Key]bool{}
			}
			refused[vss[j].Key] = true
		}
	})
	return refused
}

// addRealServers adds add to d's virtual server and m: where the kernel
// has one already (someone else's, since the dump), it takes it over with
// `ipvsadm -e`. With prefix, add is d's list and m's stays a prefix of it
// while the adds succeed in order.
func (r *Reconciler) addRealServers(d *VirtualServer, m *mirrorVS, add []RealServer, prefix bool, res *Result) {
	if len(add) == 0 {
		return
	}
	r.t.AddRealServers(d.Key, add, func(i int, err error) {
		rs := add[i]
		if errors.Is(err, ErrExists) {
			err = r.t.UpdateRealServer(d.Key, rs)
		}
		if err != nil {
			res.fail(d.Service, d.Key, err)
			return
		}
		if prefix && len(m.vs.RealServers) == i {
			m.vs.RealServers, m.summed = d.RealServers[:i+1:i+1], false
		} else {
			m.ownRS()
			m.vs.RealServers = append(m.vs.RealServers, rs)
		}
		res.RealServersAdded++
		delete(r.grace, graceKey{Key: d.Key, Addr: rs.Address, Port: rs.Port})
	})
}
