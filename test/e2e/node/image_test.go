//go:build !kernel

package node_test

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
)

// TestWriteTestImage reads back the test image's tar as `ctr images
// import` does: index.json names its reference, and every blob the
// index, the manifest and the config refer to is there with its digest.
func TestWriteTestImage(t *testing.T) {
	dir := t.TempDir()
	bin, out := filepath.Join(dir, "bin"), filepath.Join(dir, "image.tar")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := node.WriteTestImage(out, bin); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	blob := func(d v1.Descriptor) []byte {
		t.Helper()
		b, ok := files[filepath.Join("blobs", d.Digest.Algorithm().String(), d.Digest.Encoded())]
		if !ok || digest.FromBytes(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s (%d bytes): missing or not matching", d.Digest, d.Size)
		}
		return b
	}
	var index v1.Index
	if err := json.Unmarshal(files[v1.ImageIndexFile], &index); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range index.Manifests {
		names = append(names, m.Annotations["io.containerd.image.name"])
		var manifest v1.Manifest
		if err := json.Unmarshal(blob(m), &manifest); err != nil {
			t.Fatal(err)
		}
		var config v1.Image
		if err := json.Unmarshal(blob(manifest.Config), &config); err != nil {
			t.Fatal(err)
		}
		for i, l := range manifest.Layers {
			if digest.FromBytes(blob(l)) != config.RootFS.DiffIDs[i] {
				t.Errorf("layer %d: diff ID %s does not match", i, config.RootFS.DiffIDs[i])
			}
		}
		if !slices.Equal(config.Config.Entrypoint, []string{"/testpod"}) || config.Architecture != "amd64" {
			t.Errorf("config: entrypoint %q, architecture %q", config.Config.Entrypoint, config.Architecture)
		}
	}
	if want := []string{node.PauseImage}; !slices.Equal(names, want) {
		t.Errorf("index names %q, want %q", names, want)
	}
	if _, ok := files[v1.ImageLayoutFile]; !ok {
		t.Errorf("no %s", v1.ImageLayoutFile)
	}
}
