package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
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

// The test image's references. PauseImage is the sandbox image the node's
// containerd is configured with (kubelet v1.34's default); ServeImage runs
// the same program as a backend (testpod -serve).
const (
	PauseImage = "registry.k8s.io/pause:3.10"
	ServeImage = "ipvs-proxy.test/testpod:1"
	testpodBin = "/testpod"
)

// WriteTestImage writes, as one OCI image layout in a tar at out, the
// linux/amd64 image of the static binary bin at /testpod, its entrypoint,
// indexed once under each of PauseImage and ServeImage: what `ctr -n k8s.io
// images import` needs to give the kubelet both without a registry.
func WriteTestImage(out, bin string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("test image: %w", err)
	}
	created := time.Unix(0, 0).UTC()
	layer, err := tarOf(map[string][]byte{testpodBin[1:]: data}, 0o755)
	if err != nil {
		return fmt.Errorf("test image layer: %w", err)
	}
	blobs := map[digest.Digest][]byte{}
	add := func(mediaType string, b []byte) v1.Descriptor {
		d := digest.FromBytes(b)
		blobs[d] = b
		return v1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(layer); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	platform := v1.Platform{OS: "linux", Architecture: "amd64"}
	config, err := json.Marshal(v1.Image{Created: &created, Platform: platform,
		Config: v1.ImageConfig{Entrypoint: []string{testpodBin}},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(layer)}}})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest,
		Config: add(v1.MediaTypeImageConfig, config), Layers: []v1.Descriptor{add(v1.MediaTypeImageLayerGzip, gz.Bytes())}})
	if err != nil {
		return err
	}
	index := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex}
	for _, name := range []string{PauseImage, ServeImage} {
		d := add(v1.MediaTypeImageManifest, manifest)
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
