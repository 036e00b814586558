package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// The paths of the binary in the image: the name kube-proxy is a symbolic
// link, so that a kube-proxy DaemonSet whose image is swapped runs
// `ipvs-proxy run` with kube-proxy's command line (cmd/ipvs-proxy ArgsFor).
const (
	BinaryPath    = "usr/local/bin/ipvs-proxy"
	KubeProxyPath = "usr/local/bin/kube-proxy"
)

// kubeProxyLink is false only in tests that build an image as it was
// before it had the kube-proxy name, to see Check refuse it.
var kubeProxyLink = true

// Input is one platform's image: the Debian root file system and the
// static binary built for Arch.
type Input struct {
	Arch   string
	RootFS string
	Binary string
}

// layoutWriter writes blobs into an OCI image layout.
type layoutWriter struct{ dir string }

// blob stores data under its digest and returns its descriptor.
func (w layoutWriter) blob(mediaType string, data []byte) (v1.Descriptor, error) {
	sum := sha256.Sum256(data)
	d := digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(sum[:]))
	path := filepath.Join(w.dir, "blobs", "sha256", d.Encoded())
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return v1.Descriptor{}, fmt.Errorf("write blob %s: %w", d, err)
	}
	return v1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}, nil
}

func (w layoutWriter) json(mediaType string, v any) (v1.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return v1.Descriptor{}, err
	}
	return w.blob(mediaType, data)
}

// Build writes a fresh OCI image layout at dir holding one image index,
// tagged tag, over one image per input.
func Build(dir, tag string, created time.Time, inputs []Input) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return err
	}
	w := layoutWriter{dir}
	index := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex}
	for _, in := range inputs {
		desc, err := w.image(tag, created, in)
		if err != nil {
			return fmt.Errorf("image for linux/%s: %w", in.Arch, err)
		}
		index.Manifests = append(index.Manifests, desc)
	}
	indexDesc, err := w.json(v1.MediaTypeImageIndex, index)
	if err != nil {
		return err
	}
	indexDesc.Annotations = map[string]string{v1.AnnotationRefName: tag}
	top := v1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{indexDesc}}
	b, err := json.Marshal(top)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, v1.ImageIndexFile), b, 0o644); err != nil {
		return err
	}
	b, err = json.Marshal(v1.ImageLayout{Version: v1.ImageLayoutVersion})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, v1.ImageLayoutFile), b, 0o644)
}

// image writes one platform's layers, config and manifest.
func (w layoutWriter) image(tag string, created time.Time, in Input) (v1.Descriptor, error) {
	rootfs, err := os.ReadFile(in.RootFS)
	if err != nil {
		return v1.Descriptor{}, err
	}
	bin, err := binaryLayer(in.Binary, created)
	if err != nil {
		return v1.Descriptor{}, err
	}
	config := v1.Image{
		Created:  &created,
		Platform: v1.Platform{OS: "linux", Architecture: in.Arch},
		Config: v1.ImageConfig{
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Entrypoint: []string{"/" + BinaryPath},
			Cmd:        []string{"run"},
			Labels: map[string]string{
				v1.AnnotationVersion:  tag,
				v1.AnnotationSource:   "https://github.com/ipvs-proxy/ipvs-proxy",
				v1.AnnotationLicenses: "Apache-2.0",
			},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	manifest := v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest}
	for _, layer := range []struct {
		tar       []byte
		createdBy string
	}{
		{rootfs, "scripts/release-rootfs.sh " + in.Arch + " (Debian packages, dpkg-deb)"},
		{bin, "the static ipvs-proxy binary, also as kube-proxy"},
	} {
		gz, err := gzipped(layer.tar)
		if err != nil {
			return v1.Descriptor{}, err
		}
		desc, err := w.blob(v1.MediaTypeImageLayerGzip, gz)
		if err != nil {
			return v1.Descriptor{}, err
		}
		manifest.Layers = append(manifest.Layers, desc)
		diff := sha256.Sum256(layer.tar)
		config.RootFS.DiffIDs = append(config.RootFS.DiffIDs, digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(diff[:])))
		config.History = append(config.History, v1.History{Created: &created, CreatedBy: layer.createdBy})
	}
	manifest.Config, err = w.json(v1.MediaTypeImageConfig, config)
	if err != nil {
		return v1.Descriptor{}, err
	}
	desc, err := w.json(v1.MediaTypeImageManifest, manifest)
	if err != nil {
		return v1.Descriptor{}, err
	}
	desc.Platform = &config.Platform
	return desc, nil
}

// binaryLayer is a tar of the binary at BinaryPath and the link
// KubeProxyPath, owned by root, dated created.
func binaryLayer(path string, created time.Time) ([]byte, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, dir := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: created, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: BinaryPath, Mode: 0o755, Size: int64(len(bin)), ModTime: created, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if kubeProxyLink {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: KubeProxyPath, Linkname: filepath.Base(BinaryPath), Mode: 0o777, ModTime: created, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipped compresses data with a header that carries no name or time.
func gzipped(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := io.Copy(zw, bytes.NewReader(data)); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
