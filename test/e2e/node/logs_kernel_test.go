//go:build kernel

package node_test

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// logsThroughAPI requires `kubectl logs` of the pod's container, GET
// pods/NAME/log through the API server (which asks the node's kubelet over
// its egress tunnel), to return the message of fileLine, a line of the
// container's log file under /var/log/pods in the CRI format (time,
// stream, tag, message).
func logsThroughAPI(ctx context.Context, b *bed, pod *corev1.Pod, container, fileLine string) {
	b.t.Helper()
	fields := strings.SplitN(fileLine, " ", 4)
	if len(fields) != 4 {
		b.t.Fatalf("log file line %q: not time, stream, tag and message", fileLine)
	}
	msg := fields[3]
	raw, err := b.c.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		b.t.Fatalf("GET /api/v1/namespaces/%s/pods/%s/log?container=%s: %v", pod.Namespace, pod.Name, container, err)
	}
	if !strings.Contains(string(raw), msg) {
		b.t.Errorf("GET pods/%s/log (%d bytes) lacks the log file's line %q", pod.Name, len(raw), msg)
		return
	}
	b.t.Logf("GET /api/v1/namespaces/%s/pods/%s/log?container=%s: %d bytes, with the log file's first line", pod.Namespace, pod.Name, container, len(raw))
}
