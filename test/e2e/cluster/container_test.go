package cluster_test

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestContainerArgv: a container runs as kubelet would start it: the
// agnhost image's entrypoint (or the command given) then the args, with
// $(VAR) expanded from the env, the downward API's pod and host IPs
// included (upstream's netserver: --udp-listen-addresses=$(HOST_IP),$(POD_IPS)).
func TestContainerArgv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "netserver-0", Namespace: "nettest-1"}}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	c := corev1.Container{Image: "registry.k8s.io/e2e-test-images/agnhost:2.56",
		Args: []string{"netexec", "--http-port=8083", "--udp-listen-addresses=$(HOST_IP),$(POD_IPS)", "$(UNSET)"},
		Env: []corev1.EnvVar{field("HOST_IP", "status.hostIP"), field("POD_IPS", "status.podIPs"),
			{Name: "GREETING", Value: "on $(HOST_IP)"}, field("LIMIT", "limits.cpu")}}
	env, unknown := cluster.ContainerEnv(pod, c, netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("192.168.50.11"), "node-a")
	if env["GREETING"] != "on 192.168.50.11" {
		t.Errorf("GREETING = %q, want $(HOST_IP) expanded", env["GREETING"])
	}
	if !slices.Equal(unknown, []string{"LIMIT (fieldRef limits.cpu)"}) {
		t.Errorf("unknown env %q, want LIMIT named", unknown)
	}
	got := cluster.ContainerArgv(c, env)
	want := []string{"/agnhost", "netexec", "--http-port=8083", "--udp-listen-addresses=192.168.50.11,10.244.1.2", "$(UNSET)"}
	if !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	c.Command = []string{"/bin/sh", "-c"}
	c.Args = []string{"echo $(HOST_IP)"}
	if got := cluster.ContainerArgv(c, env); !slices.Equal(got, []string{"/bin/sh", "-c", "echo 192.168.50.11"}) {
		t.Errorf("with a command: argv %q", got)
	}
	if got := cluster.ContainerArgv(corev1.Container{Image: "registry.k8s.io/pause:3.10"}, nil); got != nil {
		t.Errorf("pause image: argv %q, want nothing to run", got)
	}
}

// TestRunningContainers: a restartable init container (a sidecar,
// restartPolicy Always) runs, before the app containers; the init
// containers that run to completion are the others, in order.
func TestRunningContainers(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "setup"}, {Name: "sidecar-port", RestartPolicy: &always}, {Name: "wait"}},
		Containers:     []corev1.Container{{Name: "agnhost-container"}}}}
	names := func(cs []corev1.Container) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if got, want := names(cluster.RunningContainers(pod)), []string{"sidecar-port", "agnhost-container"}; !slices.Equal(got, want) {
		t.Errorf("running containers %q, want %q", got, want)
	}
	if got, want := names(cluster.InitContainers(pod)), []string{"setup", "wait"}; !slices.Equal(got, want) {
		t.Errorf("init containers %q, want %q", got, want)
	}
}
