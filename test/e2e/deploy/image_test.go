//go:build !kernel

package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
)

// TestImage runs the DaemonSet's image in the VM as a kubelet would run the
// replace-kube-proxy overlay's pod on two nodes, one nft and one legacy (see
// TestImageGuest for what the guest checks). The host half puts kubeadm
// v1.34's kube-proxy objects on the API server (the control-plane endpoint
// being the server as the node namespaces reach it, 127.0.0.1:PORT through a
// relay), applies the overlay, resolves the pod the DaemonSet controller
// would create on each node (kube-proxy's ConfigMap files, the kube-proxy
// ServiceAccount's token, env, host paths), unpacks the image with umoci
// and boots the VM.
//
// IPVS_PROXY_IMAGE is the OCI image (LAYOUT:TAG) `make image` built; make
// test-image sets it. Without it the test skips: make test-e2e only
// compiles it.
func TestImage(t *testing.T) {
	image := os.Getenv("IPVS_PROXY_IMAGE")
	if image == "" {
		t.Skip("IPVS_PROXY_IMAGE is not set: make test-image builds the image and runs this test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{"--allow-privileged=true"}})
	if err := deploy.InstallKubeadm(ctx, srv, srv.URL); err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Build(deploy.ReplaceKubeProxy)
	if err != nil {
		t.Fatal(err)
	}
	a, err := deploy.NewApplier(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := a.Apply(ctx, objs, false)
	if err != nil {
		t.Fatal(err)
	}
	ds := daemonSetIn(t, stored, "ipvs-proxy")
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	dir := t.TempDir()
	var pods []*deploy.PodRun
	for _, node := range []string{nftNode, legacyNode} {
		pod, err := deploy.AdmittedPod(ctx, admin, ds, node)
		if err != nil {
			t.Fatal(err)
		}
		run, err := deploy.ResolvePod(ctx, admin, pod, node, filepath.Join(dir, node))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, run)
	}
	podsFile := filepath.Join(dir, "pods.json")
	b, err := json.MarshalIndent(pods, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podsFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("resolved pods:\n%s", b)

	bundle := filepath.Join(dir, "bundle")
	start := time.Now()
	if out, err := exec.Command("umoci", "unpack", "--image", image, bundle).CombinedOutput(); err != nil {
		t.Fatalf("umoci unpack --image %s: %v\n%s", image, err, out)
	}
	t.Logf("umoci unpack: %v", time.Since(start).Round(time.Millisecond))

	guestKC := filepath.Join(dir, "admin.kubeconfig")
	if err := srv.WriteKubeconfig(guestKC, srv.Config(), srv.GuestURL()); err != nil {
		t.Fatal(err)
	}
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestImageGuest", BuildFlags: []string{"-vet=off"}, Timeout: 12 * time.Minute,
		Port: srv.Port, Env: []string{"IMAGE_BUNDLE=" + bundle, "IMAGE_PODS=" + podsFile, "IMAGE_KUBECONFIG_ADMIN=" + guestKC}})
}
