package applier

import (
	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Critical applies st, the plan of the critical Services alone (the API
// server's default/kubernetes and the cluster DNS), before the first full
// sync, in the safe order of a sync: their virtual servers, then their
// ipset entries and rules, then their kube-ipvs0 addresses once their
// virtual servers exist. It only adds: kube-ipvs0 is read as a partial
// sync reads it, nothing is unbound, no virtual server deleted, no table
// read. Everything else is the full sync's, which follows, finds these as
// it wants them and leaves them be (ipvs.Reconciler.Ensure).
//
// When every address of st is already bound (a restart: the kernel kept
// serving them), it changes nothing more and says so (already).
func (a *Applier) Critical(st *planner.State) (res *Result, already bool, err error) {
	res = &Result{IPVS: &ipvs.Result{}, Unbind: &addrmgr.Result{}, Bind: &addrmgr.Result{}}
	s := &syncRun{a: a, st: st, changed: changedSet{}, res: res, mark: a.Clock.Now()}
	if _, err := s.dump(); err != nil {
		return nil, false, err
	}
	if s.allBound() {
		return res, true, nil
	}
	// A crash before the binds leaves virtual servers kube-ipvs0 does not
	// show to be ours: journaled first, as a sync's record step does.
	during := ipvs.Coverage{NodeAddrs: a.nodeAddrs, Bound: a.addrs.Bound}
	if err := a.ipvs.Record(st.VirtualServers, during, nil); err != nil {
		a.log.Warn("ownership journal not written: a restart after a crash may not adopt every virtual server", zap.Error(err))
	}
	s.lap(&s.res.Took.Journal)
	s.res.IPVS = a.ipvs.Ensure(st.VirtualServers)
	for _, f := range s.res.IPVS.Failures {
		s.res.add(f.ID.Service, f)
	}
	s.lap(&s.res.Took.IPVS)
	s.syncRules()
	s.bind()
	a.settle(s.res, false)
	s.lap(&s.res.Took.Journal)
	s.logResult()
	return res, false, nil
}

// allBound reports whether kube-ipvs0 holds every address of the run's
// state, as last read.
func (s *syncRun) allBound() bool {
	for _, p := range s.st.Addresses {
		if !s.a.addrs.Bound(p.Addr()) {
			return false
		}
	}
	return true
}
