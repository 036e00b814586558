// Command testpod is the pause process of the test node's pod sandboxes
// (package node's PauseImage): it holds the pod's namespaces and sleeps
// until SIGTERM or SIGINT, as Kubernetes' pause does.
//
// Static (CGO_ENABLED=0), so the image needs no other file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

// main waits for SIGTERM or SIGINT. As PID 1 of the sandbox it also reaps
// nothing: the runtime gives every container of the pod its own PID
// namespace unless the pod shares one, as Kubernetes' pause then would.
func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
