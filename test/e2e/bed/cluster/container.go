package cluster

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// AgnhostEntrypoint is the agnhost image's entrypoint; the upstream bed
// links it to the real agnhost binary in the VM's root filesystem, so
// both a container and an exec'd command find it.
const AgnhostEntrypoint = "/agnhost"

// ContainerArgv is what a container runs, as kubelet builds it: command
// (or the image's entrypoint) then args, $(VAR) expanded from env. An
// image the bed has no entrypoint for (pause) runs nothing: nil.
func ContainerArgv(c corev1.Container, env map[string]string) []string {
	argv := c.Command
	if len(argv) == 0 {
		if !strings.Contains(c.Image, "agnhost") {
			return nil
		}
		argv = []string{AgnhostEntrypoint}
	}
	mapping := expansion.MappingFuncFor(env)
	var out []string
	for _, a := range append(append([]string(nil), argv...), c.Args...) {
		out = append(out, expansion.Expand(a, mapping))
	}
	return out
}

// InitContainers are pod's init containers that run to completion, in
// order, before kubelet starts its running containers (not the
// restartable ones: RunningContainers has those).
func InitContainers(pod *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return out
}

// RunningContainers are the containers kubelet keeps running for pod, in
// the order it starts them: the restartable init containers (sidecars,
// restartPolicy Always) first, then the app containers. Init containers
// that run to completion are not among them (InitContainers).
func RunningContainers(pod *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return append(out, pod.Spec.Containers...)
}

// ContainerEnv is a container's environment as kubelet gives it: literal
// values ($(VAR) expanded from the ones before) and the downward API's
// fields the upstream tests use. A field the bed does not know is left
// out and named in the returned list.
func ContainerEnv(pod *corev1.Pod, c corev1.Container, podIP, hostIP netip.Addr, node string) (map[string]string, []string) {
	fields := map[string]string{
		"metadata.name": pod.Name, "metadata.namespace": pod.Namespace, "metadata.uid": string(pod.UID),
		"spec.nodeName": node, "spec.serviceAccountName": pod.Spec.ServiceAccountName,
		"status.podIP": podIP.String(), "status.podIPs": podIP.String(),
		"status.hostIP": hostIP.String(), "status.hostIPs": hostIP.String(),
	}
	env := map[string]string{}
	var unknown []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expansion.Expand(e.Value, expansion.MappingFuncFor(env))
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				unknown = append(unknown, e.Name+" (fieldRef "+e.ValueFrom.FieldRef.FieldPath+")")
				continue
			}
			env[e.Name] = v
		default:
			unknown = append(unknown, e.Name)
		}
	}
	return env, unknown
}
