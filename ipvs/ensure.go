package ipvs

// Ensure creates or updates the desired virtual servers and their real
// servers, with no dump and before any Full: the first sync's critical
// Services (internal/drive/applier.Applier.Critical), served before a full sync
// of every Service. It deletes nothing and quiesces nothing the mirror did
// not program: what else the table holds is the Full's, which follows,
// finds these in its dump as the mirror has them and leaves them as they
// are. A virtual server already in the table is taken over as a Full's
// creation takes it (created).
func (r *Reconciler) Ensure(desired []VirtualServer) *Result {
	res := &Result{}
	for i := range desired {
		r.apply(&desired[i], res)
	}
	r.logResult("ensure", res)
	return res
}
