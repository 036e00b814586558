package main

import (
	"bufio"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// Input is one architecture's binary and the image's Debian package list
// ("name version architecture" per line).
type Input struct {
	Arch     string
	Binary   string
	Packages string
}

// ErrInput is wrapped by errors about a malformed input file.
var ErrInput = errors.New("sbom input")

// The SPDX 2.3 JSON fields this document uses.
type (
	spdxDocument struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreationInfo   `json:"creationInfo"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		Name             string       `json:"name"`
		SPDXID           string       `json:"SPDXID"`
		VersionInfo      string       `json:"versionInfo"`
		DownloadLocation string       `json:"downloadLocation"`
		FilesAnalyzed    bool         `json:"filesAnalyzed"`
		LicenseConcluded string       `json:"licenseConcluded"`
		LicenseDeclared  string       `json:"licenseDeclared"`
		Comment          string       `json:"comment,omitempty"`
		ExternalRefs     []spdxExtRef `json:"externalRefs,omitempty"`
	}
	spdxExtRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	spdxRelationship struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

const noAssertion = "NOASSERTION"

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(parts ...string) string {
	return "SPDXRef-" + idUnsafe.ReplaceAllString(strings.Join(parts, "-"), "-")
}

// Document returns the SPDX document of the release: per architecture, the
// image (root package) contains the binary's Go modules and the Debian
// packages.
func Document(version, created string, licences map[string]string, inputs []Input) (*spdxDocument, error) {
	doc := &spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              "ipvs-proxy-" + version,
		DocumentNamespace: "https://github.com/ipvs-proxy/ipvs-proxy/releases/" + version + "/sbom.spdx.json",
		CreationInfo:      spdxCreationInfo{Created: created, Creators: []string{"Tool: ipvs-proxy tools/sbom"}},
	}
	for _, in := range inputs {
		image := spdxPackage{
			Name: "ipvs-proxy image linux/" + in.Arch, SPDXID: spdxID("image", in.Arch), VersionInfo: version,
			DownloadLocation: noAssertion, LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0",
			ExternalRefs: []spdxExtRef{purl(fmt.Sprintf("pkg:oci/ipvs-proxy@%s?arch=%s&repository_url=%s",
				version, in.Arch, url.QueryEscape("ghcr.io/ipvs-proxy/ipvs-proxy")))},
		}
		doc.Packages = append(doc.Packages, image)
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID})
		contained, err := goModules(in, licences)
		if err != nil {
			return nil, err
		}
		debs, err := debianPackages(in)
		if err != nil {
			return nil, err
		}
		for _, p := range append(contained, debs...) {
			doc.Packages = append(doc.Packages, p)
			doc.Relationships = append(doc.Relationships, spdxRelationship{image.SPDXID, "CONTAINS", p.SPDXID})
		}
	}
	return doc, nil
}

func purl(locator string) spdxExtRef {
	return spdxExtRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: locator}
}

// goModules lists the main module and every module linked into in.Binary,
// from the binary's build information (what `go version -m` prints).
func goModules(in Input, licences map[string]string) ([]spdxPackage, error) {
	bi, err := buildinfo.ReadFile(in.Binary)
	if err != nil {
		return nil, fmt.Errorf("%w: build information of %s: %w", ErrInput, in.Binary, err)
	}
	pkgs := []spdxPackage{{
		Name: bi.Main.Path, SPDXID: spdxID("go", in.Arch, bi.Main.Path), VersionInfo: bi.GoVersion,
		DownloadLocation: noAssertion, LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0",
		Comment: "the ipvs-proxy binary, built with " + bi.GoVersion + " (its standard library is BSD-3-Clause)",
	}}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		lic, ok := licences[m.Path+" "+m.Version]
		if !ok {
			return nil, fmt.Errorf("%w: module %s %s of %s is not in NOTICE: run go run ./tools/notice", ErrInput, m.Path, m.Version, in.Binary)
		}
		pkgs = append(pkgs, spdxPackage{
			Name: m.Path, SPDXID: spdxID("go", in.Arch, m.Path), VersionInfo: m.Version,
			DownloadLocation: "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip",
			LicenseConcluded: lic, LicenseDeclared: lic,
			ExternalRefs: []spdxExtRef{purl("pkg:golang/" + m.Path + "@" + m.Version)},
		})
	}
	return pkgs, nil
}

// debianPackages lists the packages of in.Packages.
func debianPackages(in Input) ([]spdxPackage, error) {
	f, err := os.Open(in.Packages)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	defer f.Close()
	var pkgs []spdxPackage
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			return nil, fmt.Errorf("%w: %s: line %q, want NAME VERSION ARCHITECTURE", ErrInput, in.Packages, sc.Text())
		}
		name, version, arch := fields[0], fields[1], fields[2]
		pkgs = append(pkgs, spdxPackage{
			Name: name, SPDXID: spdxID("deb", in.Arch, name), VersionInfo: version,
			DownloadLocation: noAssertion, LicenseConcluded: noAssertion, LicenseDeclared: noAssertion,
			Comment: "Debian package; its licence is in /usr/share/doc/" + name + "/copyright of the Debian package",
			ExternalRefs: []spdxExtRef{purl(fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s&distro=debian-12",
				name, url.QueryEscape(version), arch))},
		})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%w: %s lists no package", ErrInput, in.Packages)
	}
	return pkgs, nil
}

// readNotice returns the licence of each "module version" NOTICE lists.
func readNotice(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// Module lines: PATH VERSION LICENCE [AND LICENCE...].
		if len(f) >= 3 && strings.Contains(f[0], ".") && strings.HasPrefix(f[1], "v") {
			m[f[0]+" "+f[1]] = strings.Join(f[2:], " ")
		}
	}
	return m, nil
}
