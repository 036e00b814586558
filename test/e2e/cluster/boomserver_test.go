//go:build !kernel

package cluster_test

import (
	"path/filepath"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
)

// boomServerPkg is upstream's boom-server (the image
// e2e-test-images/regression-issue-74839 the invalid-conntrack-state test
// runs): it answers each completed TCP handshake on :9000 with an
// out-of-window segment and logs "ERROR" when the client resets.
const boomServerPkg = "k8s.io/kubernetes/test/images/regression-issue-74839"

// boomServer builds the boom-server into dir for the guest (SN-95) and
// returns the CLUSTER_BOOM_SERVER entry of its environment.
func boomServer(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "boom-server")
	if err := gobuild.Run(".", "build", "-o", bin, boomServerPkg); err != nil {
		t.Fatal(err)
	}
	return "CLUSTER_BOOM_SERVER=" + bin
}
