package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// ErrImage is wrapped by every finding of Check.
var ErrImage = errors.New("release image")

// elfMachine is each architecture's ELF e_machine.
var elfMachine = map[string]uint16{"amd64": 62, "arm64": 183}

// Image is what Check read of one platform's image.
type Image struct {
	Arch     string
	Manifest digest.Digest
	Config   v1.Image
	// Files are the merged layers' entries by path (no leading "/").
	Files map[string]*tar.Header
	// heads are the first bytes of the regular files whose ELF header is
	// checked.
	heads map[string][]byte
}

// elfChecked are the files whose ELF machine must be the image's
// architecture: the binary, and the iptables of the Debian layer.
var elfChecked = []string{BinaryPath, "usr/sbin/xtables-nft-multi", "usr/sbin/xtables-legacy-multi",
	"usr/bin/kmod", "usr/bin/update-alternatives", "usr/bin/dash", "usr/bin/bash"}

// Check reads the image index tagged tag in the OCI layout dir and checks
// that it holds one image for each of archs, each intact (every digest
// verified) and complete: the binary of its architecture under both names,
// the iptables wrapper as the iptables alternatives, iptables (nft and
// legacy) and kmod of its architecture, the shells the init containers run.
// It returns what it read, and every finding joined.
func Check(dir, tag string, archs []string) ([]Image, error) {
	r := layoutReader{dir}
	var top v1.Index
	if err := r.readJSON(filepath.Join(dir, v1.ImageIndexFile), &top); err != nil {
		return nil, err
	}
	var indexDesc *v1.Descriptor
	for i, d := range top.Manifests {
		if d.Annotations[v1.AnnotationRefName] == tag {
			indexDesc = &top.Manifests[i]
		}
	}
	if indexDesc == nil {
		return nil, fmt.Errorf("%w: no tag %s in %s", ErrImage, tag, dir)
	}
	if indexDesc.MediaType != v1.MediaTypeImageIndex {
		return nil, fmt.Errorf("%w: tag %s is a %s, want an image index", ErrImage, tag, indexDesc.MediaType)
	}
	var index v1.Index
	if err := r.blobJSON(*indexDesc, &index); err != nil {
		return nil, err
	}
	var imgs []Image
	var errs []error
	seen := map[string]bool{}
	for _, d := range index.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			errs = append(errs, fmt.Errorf("%w: manifest %s has platform %+v, want linux", ErrImage, d.Digest, d.Platform))
			continue
		}
		arch := d.Platform.Architecture
		if seen[arch] {
			errs = append(errs, fmt.Errorf("%w: two images for linux/%s", ErrImage, arch))
		}
		seen[arch] = true
		img, err := r.image(d, arch)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: linux/%s: %w", ErrImage, arch, err))
			continue
		}
		imgs = append(imgs, img)
		errs = append(errs, img.findings(tag)...)
	}
	for _, a := range archs {
		if !seen[a] {
			errs = append(errs, fmt.Errorf("%w: no image for linux/%s in the index", ErrImage, a))
		}
	}
	return imgs, errors.Join(errs...)
}

// findings checks one image's config and files.
func (img Image) findings(tag string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: linux/%s: %s", ErrImage, img.Arch, fmt.Sprintf(format, args...)))
	}
	c := img.Config
	if c.OS != "linux" || c.Architecture != img.Arch {
		bad("config is for %s/%s", c.OS, c.Architecture)
	}
	if got := c.Config.Labels[v1.AnnotationVersion]; got != tag {
		bad("label %s is %q, want the tag %s", v1.AnnotationVersion, got, tag)
	}
	if !slices.Equal(c.Config.Entrypoint, []string{"/" + BinaryPath}) {
		bad("entrypoint %q, want /%s", c.Config.Entrypoint, BinaryPath)
	}
	for _, p := range elfChecked {
		h, ok := img.heads[p]
		if !ok {
			bad("%s missing or not a regular file", p)
			continue
		}
		want := elfMachine[img.Arch]
		if len(h) < 20 || string(h[:4]) != "\x7fELF" {
			bad("%s is not an ELF binary", p)
		} else if got := binary.LittleEndian.Uint16(h[18:20]); got != want {
			bad("%s is for ELF machine %d, want %d (%s)", p, got, want, img.Arch)
		}
	}
	if h := img.Files[BinaryPath]; h != nil && h.Mode&0o111 == 0 {
		bad("%s is not executable", BinaryPath)
	}
	links := map[string]string{
		// kube-proxy's own DaemonSet runs /usr/local/bin/kube-proxy.
		KubeProxyPath: BinaryPath,
		// The wrapper picks the node's backend at the first call.
		"usr/sbin/iptables":         "usr/sbin/iptables-wrapper",
		"usr/sbin/iptables-restore": "usr/sbin/iptables-wrapper",
		"usr/sbin/ip6tables-save":   "usr/sbin/iptables-wrapper",
		"usr/sbin/iptables-nft":     "usr/sbin/xtables-nft-multi",
		"usr/sbin/iptables-legacy":  "usr/sbin/xtables-legacy-multi",
		"usr/sbin/modprobe":         "usr/bin/kmod",
		// The init containers' shells.
		"bin/sh":   "usr/bin/dash",
		"bin/bash": "usr/bin/bash",
	}
	for _, from := range slices.Sorted(maps.Keys(links)) {
		to := links[from]
		got, err := img.resolve(from)
		if err != nil {
			bad("%s: %v", from, err)
		} else if got != to {
			bad("%s resolves to %s, want %s", from, got, to)
		}
	}
	if h := img.Files["usr/sbin/iptables-wrapper"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
		bad("usr/sbin/iptables-wrapper missing or not an executable file")
	}
	return errs
}

// resolve follows symbolic links in p, component by component, to the
// path of a regular file or directory in the image.
func (img Image) resolve(p string) (string, error) {
	for hops := 0; hops < 40; hops++ {
		parts := strings.Split(p, "/")
		linked := false
		for i := range parts {
			prefix := strings.Join(parts[:i+1], "/")
			h, ok := img.Files[prefix]
			if !ok {
				return "", fmt.Errorf("%s not in the image", prefix)
			}
			if h.Typeflag != tar.TypeSymlink {
				continue
			}
			target := h.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(prefix), target)
			}
			p = strings.TrimPrefix(path.Join(append([]string{target}, parts[i+1:]...)...), "/")
			linked = true
			break
		}
		if !linked {
			return p, nil
		}
	}
	return "", fmt.Errorf("too many symbolic links")
}

// layoutReader reads blobs of an OCI layout, verifying their digests.
type layoutReader struct{ dir string }

func (r layoutReader) readJSON(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrImage, err)
	}
	return json.Unmarshal(b, v)
}

func (r layoutReader) blob(d v1.Descriptor) ([]byte, error) {
	if err := d.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("%w: digest %q: %w", ErrImage, d.Digest, err)
	}
	b, err := os.ReadFile(filepath.Join(r.dir, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded()))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrImage, err)
	}
	if got := digest.FromBytes(b); got != d.Digest || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("%w: blob %s has digest %s and size %d, want size %d", ErrImage, d.Digest, got, len(b), d.Size)
	}
	return b, nil
}

func (r layoutReader) blobJSON(d v1.Descriptor, v any) error {
	b, err := r.blob(d)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// image reads one platform's manifest, config and layers.
func (r layoutReader) image(d v1.Descriptor, arch string) (Image, error) {
	img := Image{Arch: arch, Manifest: d.Digest, Files: map[string]*tar.Header{}, heads: map[string][]byte{}}
	var m v1.Manifest
	if err := r.blobJSON(d, &m); err != nil {
		return img, err
	}
	if err := r.blobJSON(m.Config, &img.Config); err != nil {
		return img, err
	}
	if len(img.Config.RootFS.DiffIDs) != len(m.Layers) {
		return img, fmt.Errorf("%d layers but %d diff IDs", len(m.Layers), len(img.Config.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		if err := r.layer(l, img.Config.RootFS.DiffIDs[i], &img); err != nil {
			return img, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
	}
	return img, nil
}

// layer adds a gzip layer's entries to img, checking its diff ID.
func (r layoutReader) layer(d v1.Descriptor, diffID digest.Digest, img *Image) error {
	b, err := r.blob(d)
	if err != nil {
		return err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return err
	}
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, h))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+hdr.Name), "/"), "/")
		if name == "" {
			continue
		}
		img.Files[name] = hdr
		delete(img.heads, name)
		if hdr.Typeflag == tar.TypeReg && slices.Contains(elfChecked, name) {
			head := make([]byte, 20)
			n, _ := io.ReadFull(tr, head)
			img.heads[name] = head[:n]
		}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID.String() {
		return fmt.Errorf("uncompressed digest %s, config says %s", got, diffID)
	}
	return nil
}
