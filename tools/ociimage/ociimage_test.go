package main

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// elf returns the first bytes of an ELF file for arch.
func elf(arch string) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	binary.LittleEndian.PutUint16(h[18:], elfMachine[arch])
	return h
}

// fakeRootFS writes a tar shaped like scripts/release-rootfs.sh's: merged
// /usr, iptables, kmod, the shells and the wrapper as the iptables
// alternatives; drop leaves those paths out.
func fakeRootFS(t *testing.T, dir, arch string, drop ...string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		for _, d := range drop {
			if h.Name == d {
				return
			}
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"etc/", "etc/alternatives/", "usr/", "usr/bin/", "usr/sbin/"} {
		add(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}, nil)
	}
	for _, f := range []string{"usr/sbin/xtables-nft-multi", "usr/sbin/xtables-legacy-multi", "usr/bin/kmod",
		"usr/bin/update-alternatives", "usr/bin/dash", "usr/bin/bash"} {
		add(&tar.Header{Typeflag: tar.TypeReg, Name: f, Mode: 0o755}, elf(arch))
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/sbin/iptables-wrapper", Mode: 0o755}, []byte("#!/bin/sh\n"))
	link := func(name, target string) {
		add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}, nil)
	}
	link("bin", "usr/bin")
	link("usr/bin/sh", "dash")
	link("usr/sbin/modprobe", "/bin/kmod")
	link("usr/sbin/iptables-nft", "xtables-nft-multi")
	link("usr/sbin/iptables-legacy", "xtables-legacy-multi")
	for _, n := range []string{"iptables", "iptables-restore", "ip6tables-save"} {
		link("usr/sbin/"+n, "/etc/alternatives/"+n)
		link("etc/alternatives/"+n, "/usr/sbin/iptables-wrapper")
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rootfs-"+arch+".tar")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fakeBinary(t *testing.T, dir, arch string) string {
	t.Helper()
	path := filepath.Join(dir, "ipvs-proxy-"+arch)
	if err := os.WriteFile(path, elf(arch), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

var epoch = time.Unix(1735689600, 0).UTC()

// TestBuildThenCheck builds an index from fake inputs for both
// architectures and checks it; building twice gives the same digests.
func TestBuildThenCheck(t *testing.T) {
	dir := t.TempDir()
	var in []Input
	for _, a := range []string{"amd64", "arm64"} {
		in = append(in, Input{Arch: a, RootFS: fakeRootFS(t, dir, a), Binary: fakeBinary(t, dir, a)})
	}
	layout := filepath.Join(dir, "oci")
	if err := Build(layout, "v1.2.3", epoch, in); err != nil {
		t.Fatal(err)
	}
	imgs, err := Check(layout, "v1.2.3", []string{"amd64", "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 2 {
		t.Fatalf("Check read %d images, want 2", len(imgs))
	}
	first, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Build(layout, "v1.2.3", epoch, in); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Errorf("two builds of the same inputs differ:\n%s\n%s", first, second)
	}
}

// TestCheckFindsBrokenImages proves Check can fail: each image lacks one
// thing the release needs, and Check names it.
func TestCheckFindsBrokenImages(t *testing.T) {
	for _, tc := range []struct {
		name string
		// archs built; rootfs of arm64 gets amd64 files when wrongArch.
		archs       []string
		drop        []string
		wrongArch   bool
		noKubeProxy bool
		want        string
	}{
		{name: "no kube-proxy name", archs: []string{"amd64", "arm64"}, noKubeProxy: true, want: "usr/local/bin/kube-proxy: usr/local/bin/kube-proxy not in the image"},
		{name: "one architecture", archs: []string{"amd64"}, want: "no image for linux/arm64"},
		{name: "no wrapper", archs: []string{"amd64", "arm64"}, drop: []string{"usr/sbin/iptables-wrapper"}, want: "usr/sbin/iptables-wrapper missing"},
		{name: "iptables not the wrapper", archs: []string{"amd64", "arm64"}, drop: []string{"etc/alternatives/iptables"}, want: "usr/sbin/iptables: etc/alternatives/iptables not in the image"},
		{name: "no kmod", archs: []string{"amd64", "arm64"}, drop: []string{"usr/bin/kmod"}, want: "usr/bin/kmod missing"},
		{name: "amd64 packages in the arm64 image", archs: []string{"amd64", "arm64"}, wrongArch: true, want: "linux/arm64: usr/sbin/xtables-nft-multi is for ELF machine 62, want 183"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var in []Input
			for _, a := range tc.archs {
				rootArch := a
				if tc.wrongArch {
					rootArch = "amd64"
				}
				in = append(in, Input{Arch: a, RootFS: fakeRootFS(t, t.TempDir(), rootArch, tc.drop...), Binary: fakeBinary(t, dir, a)})
			}
			layout := filepath.Join(dir, "oci")
			if err := Build(layout, "v1.2.3", epoch, in); err != nil {
				t.Fatal(err)
			}
			if tc.noKubeProxy {
				removeKubeProxy(t, layout, in)
			}
			_, err := Check(layout, "v1.2.3", []string{"amd64", "arm64"})
			if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want an ErrImage saying %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// removeKubeProxy rebuilds layout with a binary layer that lacks the
// kube-proxy link, as a build before issue 38 made it.
func removeKubeProxy(t *testing.T, layout string, in []Input) {
	t.Helper()
	old := kubeProxyLink
	kubeProxyLink = false
	defer func() { kubeProxyLink = old }()
	if err := Build(layout, "v1.2.3", epoch, in); err != nil {
		t.Fatal(err)
	}
}

func TestCheckWrongTag(t *testing.T) {
	dir := t.TempDir()
	in := []Input{{Arch: "amd64", RootFS: fakeRootFS(t, dir, "amd64"), Binary: fakeBinary(t, dir, "amd64")}}
	layout := filepath.Join(dir, "oci")
	if err := Build(layout, "v1.2.3", epoch, in); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(layout, "v9.9.9", []string{"amd64"}); err == nil || !strings.Contains(err.Error(), "no tag v9.9.9") {
		t.Errorf("Check of a missing tag = %v", err)
	}
}
