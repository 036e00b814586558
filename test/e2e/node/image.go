package node

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// containerdImageName is the annotation `ctr images import` names an image
// by when the index entry carries it (a full reference, where
// org.opencontainers.image.ref.name holds only a tag).
const containerdImageName = "io.containerd.image.name"

// The test images' references. PauseImage is the sandbox image the node's
// containerd is configured with (kubelet v1.34's default), testpod.
// KubeProxyImage is kubeadm v1.34's kube-proxy image reference.
const (
	PauseImage     = "registry.k8s.io/pause:3.10"
	KubeProxyImage = "registry.k8s.io/kube-proxy:v1.34.4"
	// AgnhostImage is the upstream e2e tests' agnhost (v1.34's tag), here
	// the binary `make agnhost` builds from k8s.io/kubernetes; the web
	// backend runs its netexec.
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.56"
	testpodBin   = "/testpod"
	kubeProxyBin = "/usr/local/bin/kube-proxy"
	agnhostBin   = "/agnhost"
)

// Image is a linux/amd64 image to write as an OCI image layout tar.
type Image struct {
	// Names are the full references it is imported under.
	Names []string
	// Layers are uncompressed tars, the base first.
	Layers     [][]byte
	Entrypoint []string
}

// WriteTestImage writes the image of the static binary bin at /testpod,
// its entrypoint, under PauseImage.
func WriteTestImage(out, bin string) error {
	layer, err := fileLayer(bin, testpodBin)
	if err != nil {
		return fmt.Errorf("test image: %w", err)
	}
	return Image{Names: []string{PauseImage}, Layers: [][]byte{layer}, Entrypoint: []string{testpodBin}}.Write(out)
}

// WriteKubeProxyImage writes KubeProxyImage: the root file system tar
// rootfs (Debian's iptables, ipset and kmod, from scripts/release-rootfs.sh)
// and the kube-proxy binary bin at /usr/local/bin/kube-proxy, as upstream's
// image has it (kubeadm's DaemonSet runs that path).
func WriteKubeProxyImage(out, rootfs, bin string) error {
	base, err := os.ReadFile(rootfs)
	if err != nil {
		return fmt.Errorf("kube-proxy image: %w", err)
	}
	layer, err := fileLayer(bin, kubeProxyBin)
	if err != nil {
		return fmt.Errorf("kube-proxy image: %w", err)
	}
	return Image{Names: []string{KubeProxyImage}, Layers: [][]byte{base, layer}, Entrypoint: []string{kubeProxyBin}}.Write(out)
}

// WriteAgnhostImage writes AgnhostImage: the static agnhost binary bin at
// /agnhost, its entrypoint, as upstream's image has it.
func WriteAgnhostImage(out, bin string) error {
	layer, err := fileLayer(bin, agnhostBin)
	if err != nil {
		return fmt.Errorf("agnhost image: %w", err)
	}
	return Image{Names: []string{AgnhostImage}, Layers: [][]byte{layer}, Entrypoint: []string{agnhostBin}}.Write(out)
}

// Write writes img at out as one OCI image layout in a tar, indexed once
// under each name: what `ctr -n k8s.io images import` needs to give the
// kubelet the image without a registry.
func (img Image) Write(out string) error {
	blobs := map[digest.Digest][]byte{}
	add := func(mediaType string, b []byte) v1.Descriptor {
		d := digest.FromBytes(b)
		blobs[d] = b
		return v1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	created := time.Unix(0, 0).UTC()
	platform := v1.Platform{OS: "linux", Architecture: "amd64"}
	config := v1.Image{Created: &created, Platform: platform, Config: v1.ImageConfig{Entrypoint: img.Entrypoint},
		RootFS: v1.RootFS{Type: "layers"}}
	manifest := v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest}
	for _, l := range img.Layers {
		manifest.Layers = append(manifest.Layers, add(v1.MediaTypeImageLayer, l))
		config.RootFS.DiffIDs = append(config.RootFS.DiffIDs, digest.FromBytes(l))
	}
	b, err := json.Marshal(config)
	if err != nil {
		return err
	}
	manifest.Config = add(v1.MediaTypeImageConfig, b)
	if b, err = json.Marshal(manifest); err != nil {
		return err
	}
	index := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex}
	for _, name := range img.Names {
		d := add(v1.MediaTypeImageManifest, b)
		d.Platform = &platform
		d.Annotations = map[string]string{containerdImageName: name, v1.AnnotationRefName: name}
		index.Manifests = append(index.Manifests, d)
	}
	files := map[string][]byte{}
	for d, b := range blobs {
		files[filepath.Join("blobs", d.Algorithm().String(), d.Encoded())] = b
	}
	if files[v1.ImageIndexFile], err = json.Marshal(index); err != nil {
		return err
	}
	if files[v1.ImageLayoutFile], err = json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion}); err != nil {
		return err
	}
	archive, err := tarOf(files, 0o644)
	if err != nil {
		return err
	}
	return os.WriteFile(out, archive, 0o644)
}

// fileLayer is a layer holding the file at src as the executable dst.
func fileLayer(src, dst string) ([]byte, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	return tarOf(map[string][]byte{dst[1:]: data}, 0o755)
}

// tarOf is a tar of files (path to content), each with mode, owned by
// root; the directories are implied, as image layers may leave them.
func tarOf(files map[string][]byte, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
