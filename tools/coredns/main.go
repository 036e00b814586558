// Command coredns is CoreDNS with only the plugins the test bed's cluster
// DNS needs (test/e2e/cluster, issue 17): kubernetes (Services and Pods as
// names under cluster.local), bind, errors, log, health, ready and cache. It
// has no forward plugin: a name outside the cluster's zones is answered
// SERVFAIL, nothing is sent past the VM. scripts/build-coredns.sh builds
// it once into .cache/coredns; it is its own module, so the project's
// go.mod does not carry CoreDNS' dependencies.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives are the plugins in the order a query passes them, as in
// CoreDNS' own plugin.cfg (core/dnsserver/zdirectives.go).
var directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
