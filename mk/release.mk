# mk/release.mk: a release an operator can install. Included by
# the top Makefile (`-include mk/*.mk`).
#
#   make release       into dist/ (scripts/release.sh): static binaries for
#                      linux/amd64 and linux/arm64 with SHA256SUMS, the
#                      two-architecture OCI image index (Debian packages
#                      unpacked with dpkg-deb, no container engine, the
#                      binary also as /usr/local/bin/kube-proxy), its tar,
#                      and the SBOM. Needs root and the Debian mirror; the
#                      root file systems are cached in .cache/release.
#   make test-release  make release, then tools/ociimage's check of dist/
#                      again and the chart's tests against the release
#
# `make test` runs the cheap halves: tools/ociimage's tests build and check
# images from fake root file systems (an image without the kube-proxy name
# fails them), tools/sbom's and tools/notice's tests run in test-unit.

# Keep the including Makefile's default goal whatever the include order.
release_default_goal := $(.DEFAULT_GOAL)

GO   ?= go
DIST ?= dist

.PHONY: release test-release
release:
	GO='$(GO)' VERSION=$(VERSION) DIST=$(DIST) bash scripts/release.sh

test-release: release
	$(GO) run ./tools/ociimage check -layout $(DIST)/oci -tag $(VERSION)
	cd $(DIST) && sha256sum -c SHA256SUMS

OPT_IN += test-release(downloads-Debian-packages-for-two-architectures)

.DEFAULT_GOAL := $(release_default_goal)
