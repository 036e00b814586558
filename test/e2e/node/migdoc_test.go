//go:build !kernel

package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
)

// TestMigrationDoc runs docs/migration.md's marked blocks on the bed of
// TestNode: the control plane with kubeadm's kube-proxy objects and the web
// NodePort Service here, node-a in the VM with kube-proxy v1.34.4 serving
// (TestMigrationDocGuest runs the blocks there, under traffic). The guide
// is parsed here first, so a broken marker fails before the VM boots.
//
// make test-migration-doc sets the binaries and images; without them the
// test skips, so make test-e2e only compiles it.
func TestMigrationDoc(t *testing.T) {
	kubelet, release, kubectl := os.Getenv(node.EnvKubelet), os.Getenv(envReleaseImage), os.Getenv(node.EnvKubectl)
	kubeProxy, rootfs := os.Getenv(envKubeProxy), os.Getenv(envKubeProxyRoots)
	if kubelet == "" || release == "" || kubectl == "" || kubeProxy == "" || rootfs == "" {
		t.Skip("make test-migration-doc sets the kubelet, kubectl, kube-proxy and the images, and runs this test")
	}
	blocks, err := node.ParseGuide(migrationGuide(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.GuideScript(blocks, node.MigrationGuide); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "testpod")
	if err := gobuild.Run(".", "build", "-trimpath", "-o", bin, "./testpod"); err != nil {
		t.Fatal(err)
	}
	testImage, kpImage := filepath.Join(dir, "testpod.tar"), filepath.Join(dir, "kube-proxy.tar")
	if err := node.WriteTestImage(testImage, bin); err != nil {
		t.Fatal(err)
	}
	if err := node.WriteKubeProxyImage(kpImage, rootfs, kubeProxy); err != nil {
		t.Fatal(err)
	}
	agnhostImage := writeAgnhostImage(t, dir)
	objs, err := deploy.Build(deploy.ReplaceKubeProxy)
	if err != nil {
		t.Fatal(err)
	}
	_, repo := releaseImage(t, objs)
	srv, admin := controlPlane(t)
	createWeb(context.Background(), t, admin, corev1.ServiceTypeNodePort)
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := srv.WriteKubeconfig(kc, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	// Longer than bootNode's: each of the walk's pod changes takes a minute
	// or more in the emulated VM.
	guest.Run(context.Background(), t, dir, guest.Suite{Test: "TestMigrationDocGuest", BuildFlags: []string{"-vet=off"},
		Timeout: 35 * time.Minute, CPUs: nodeCPUs, Port: srv.Port, Env: []string{
			node.EnvAdminKubeconfig + "=" + kc, node.EnvKubelet + "=" + kubelet, node.EnvKubectl + "=" + kubectl,
			node.EnvImports + "=" + strings.Join([]string{testImage, agnhostImage, kpImage, repo + "=" + release}, ","),
		}})
}
