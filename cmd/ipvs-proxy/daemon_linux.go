package main

import "github.com/ipvs-proxy/ipvs-proxy/internal/drive/daemon"

// runDaemon is `run`'s body: the sync loop over this node's kernel. The
// daemon opens the kernel, so it is built on Linux only.
var runDaemon = daemon.Run
