//go:build kernel

package cluster_test

import corev1 "k8s.io/api/core/v1"

// recheckGates asks the pod's probe loop to write its status again when
// the pod has readiness gates: whoever owns a gate (a test, a controller)
// sets its condition in the status, and kubelet then turns Ready on or
// off (cluster.WritePodStatus: Ready only once every gate is True). An
// update changing nothing writes nothing, so the agent's own writes do
// not loop.
func (r *podRun) recheckGates(pod *corev1.Pod) {
	if len(pod.Spec.ReadinessGates) == 0 || pod.DeletionTimestamp != nil {
		return
	}
	select {
	case r.recheck <- struct{}{}:
	default: // a recheck is already pending
	}
}
