package cluster

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// PodStatus is what a kubelet reports for a running pod: its addresses,
// its node's address and whether its readiness probe passes.
type PodStatus struct {
	PodIPs []netip.Addr
	HostIP netip.Addr
	Ready  bool
}

// apply writes s into pod's status as kubelet does: phase Running, podIP
// and podIPs, hostIP and hostIPs, and the ContainersReady and Ready
// conditions (the endpointslice controller reads Ready, which also needs
// every readiness gate's condition True).
func (s PodStatus) apply(pod *corev1.Pod) {
	st := &pod.Status
	st.Phase = corev1.PodRunning
	st.PodIPs = nil
	for _, a := range s.PodIPs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: a.String()})
	}
	st.PodIP = ""
	if len(st.PodIPs) > 0 {
		st.PodIP = st.PodIPs[0].IP
	}
	st.HostIP = s.HostIP.String()
	st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	if st.StartTime == nil {
		now := metav1.Now()
		st.StartTime = &now
	}
	setCondition(st, corev1.ContainersReady, conditionStatus(s.Ready))
	setCondition(st, corev1.PodReady, conditionStatus(s.Ready && gatesPass(pod)))
}

// gatesPass tells whether every readiness gate of pod has its condition
// True in the pod's status, as kubelet requires before the pod is Ready
// (a gate whose condition is missing holds the pod unready).
func gatesPass(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		ok := false
		for _, c := range pod.Status.Conditions {
			if c.Type == g.ConditionType {
				ok = c.Status == corev1.ConditionTrue
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func conditionStatus(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

func setCondition(st *corev1.PodStatus, typ corev1.PodConditionType, v corev1.ConditionStatus) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			if st.Conditions[i].Status != v {
				st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = v, metav1.Now()
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: v, LastTransitionTime: metav1.Now()})
}

// WritePodStatus is `kubelet`'s status update for one pod: it reads the
// Pod and writes s into its status subresource (Ready also waits for the
// pod's readiness gates); a status that would not change is not written.
func WritePodStatus(ctx context.Context, client kubernetes.Interface, namespace, name string, s PodStatus) (*corev1.Pod, error) {
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		before := pod.Status.DeepCopy()
		s.apply(pod)
		if equality.Semantic.DeepEqual(before, &pod.Status) {
			out = pod
			return nil
		}
		out, err = client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pod status %s/%s: %w", namespace, name, err)
	}
	return out, nil
}

// WritePodFailed is kubelet's status update for a pod it ended, as an
// eviction does: phase Failed with reason and message, Ready and
// ContainersReady False (the endpointslice controller drops a terminal
// pod's endpoint, publishNotReadyAddresses or not).
func WritePodFailed(ctx context.Context, client kubernetes.Interface, namespace, name, reason, message string) (*corev1.Pod, error) {
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := &pod.Status
		st.Phase, st.Reason, st.Message = corev1.PodFailed, reason, message
		for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			setCondition(st, typ, corev1.ConditionFalse)
		}
		out, err = client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pod status %s/%s: %w", namespace, name, err)
	}
	return out, nil
}
