package kubeproxy

import (
	"regexp"
	"strings"
)

// ipsetError matches a line of kube-proxy's log that reports an ipset it
// could not create, fill or swap (`error creating ipset KUBE-...`,
// `Failed to sync ipset ...`): what a node left by another proxy with sets
// of another shape makes it log on every sync.
var ipsetError = regexp.MustCompile(`(?i)(error|fail)[^\n]*ipset|ipset[^\n]*(error|fail)`)

// IPSetErrors are the lines of kube-proxy's output so far that report an
// ipset failure.
func (p *Process) IPSetErrors() []string {
	var out []string
	for _, l := range strings.Split(p.Output(), "\n") {
		if ipsetError.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}
