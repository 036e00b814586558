# mk/image.mk: the DaemonSet's OCI image without a container engine or a
# registry. Included by the top Makefile
# (`-include mk/*.mk`).
#
#   make image        bin/ipvs-proxy on a Debian root file system from the
#                     package mirrors (mmdebstrap), assembled with umoci into
#                     the OCI layout .cache/image/oci, tag IMAGE_TAG
#                     (scripts/build-image.sh; the Debian layer is cached)
#   make test-image   the replace-kube-proxy overlay's pod run from that
#                     image's root file system in the test VM, on an nft node
#                     and on a legacy node (TestImage in test/e2e/deploy)
#
# The Dockerfile builds the same image where a container engine runs.

# Keep the including Makefile's default goal whatever the include order.
image_default_goal := $(.DEFAULT_GOAL)

GO         ?= go
IMAGE_DIR  ?= .cache/image
IMAGE_TAG  ?= $(VERSION)

.PHONY: image test-image
image: build
	IMAGE_DIR=$(IMAGE_DIR) IMAGE_TAG=$(IMAGE_TAG) BIN=$(BIN) bash scripts/build-image.sh

# nft lists the nodes' nf_tables tables (the test's reader that creates none).
test-image: deps image
	@command -v nft >/dev/null || apt-get install -y -qq --no-install-recommends nftables >/dev/null
	cd test/e2e && IPVS_PROXY_IMAGE=$(CURDIR)/$(IMAGE_DIR)/oci:$(IMAGE_TAG) \
		$(GO) test -count=1 -vet=off -v -timeout 30m -run '^TestImage$$' ./deploy

OPT_IN += test-image(boots-the-VM-with-the-image)

.DEFAULT_GOAL := $(image_default_goal)
