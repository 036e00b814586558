// Command testpod is the one program of the test node's small image
// (package node): with no arguments it is the pod sandbox's pause process,
// which holds the pod's namespaces and sleeps until SIGTERM or SIGINT, as
// Kubernetes' pause does; with -serve ADDR it is a backend that answers
// every HTTP request with the pod's hostname, for traffic through a Service.
//
// Static (CGO_ENABLED=0), so the image needs no other file.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	serve := flag.String("serve", "", "answer HTTP on this address with the hostname (empty: pause)")
	flag.Parse()
	if *serve == "" {
		pause()
		return
	}
	host, err := os.Hostname()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testpod:", err)
		os.Exit(1)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, host) })
	fmt.Fprintln(os.Stderr, "testpod: serving on", *serve)
	if err := http.ListenAndServe(*serve, nil); err != nil {
		fmt.Fprintln(os.Stderr, "testpod:", err)
		os.Exit(1)
	}
}

// pause waits for SIGTERM or SIGINT. As PID 1 of the sandbox it also reaps
// nothing: the runtime gives every container of the pod its own PID
// namespace unless the pod shares one, as Kubernetes' pause then would.
func pause() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
