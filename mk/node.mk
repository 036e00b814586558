# mk/node.mk: the shipped DaemonSet on a real kubelet.
# Included by the top Makefile (`-include mk/*.mk`).
#
#   make kubelet      build the kubelet v1.34.4 once into .cache/kubelet
#                     (scripts/build-k8s.sh kubelet; a no-op when present)
#   make agnhost      the same for upstream's test image program agnhost,
#                     the backend pod's netexec, into .cache/agnhost
#   make node-image   the release image for linux/amd64 only, as `make
#                     release` assembles it (scripts/release-rootfs.sh's
#                     Debian root file system, tools/ociimage), as one OCI
#                     layout tar in $(NODE_DIR); needs root and the Debian
#                     mirror once (the root file system is cached)
#   make test-node    in the test VM, Debian's containerd, runc and CNI
#                     plugins and that kubelet form a node of the host's test
#                     API server; the replace-kube-proxy overlay's DaemonSet
#                     runs there from the imported image and serves a
#                     ClusterIP (TestNode in test/e2e/node; docs/testing.md);
#                     the helm scenario runs `make helm`'s helm (mk/chart.mk)
#
#   make test-node-install
#                     the install scenario alone: it needs neither
#                     kube-proxy's image nor the rollout's, nor helm
#                     (part of `make test`)
#
# test-node-install is in `make test` (about 2 min of `go test`); the four
# scenarios of test-node boot the VM four times for about twenty minutes.
# The node VM has one vCPU: with two, the guest's kernel locked up as the
# kubelet started in about one run of ten (docs/testing.md).

# Keep the including Makefile's default goal whatever the include order.
node_default_goal := $(.DEFAULT_GOAL)

GO          ?= go
K8S_VERSION ?= v1.34.4
KUBELET_BIN := $(CURDIR)/.cache/kubelet/kubelet-$(K8S_VERSION)
AGNHOST_BIN := $(CURDIR)/.cache/agnhost/agnhost-$(K8S_VERSION)
NODE_DIR    ?= .cache/node
# Debian bookworm's: containerd 1.6 serves the CRI v1 API that kubelet
# v1.34 requires (it falls back to its own cgroupDriver setting where 1.6
# lacks the RuntimeConfig call of containerd 2). nft: the install scenario
# keeps the API server out of the proxy pod's reach for a while.
NODE_PKGS   := containerd runc containernetworking-plugins nftables

.PHONY: kubelet agnhost node-deps node-release-image node-image test-node test-node-install
kubelet agnhost:
	GO='$(GO)' K8S_VERSION=$(K8S_VERSION) bash scripts/build-k8s.sh $@

node-deps:
	@dpkg-query -W $(NODE_PKGS) >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(NODE_PKGS) >/dev/null; }
	@dpkg-query -W -f='node-deps: $${Package} $${Version}\n' $(NODE_PKGS)

# The release image for linux/amd64, tagged $(VERSION) or, as
# node-image's second build, ROLLOUT_TAG.
ROLLOUT_TAG := $(VERSION)-rollout
define node_release_image
CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X github.com/ipvs-proxy/ipvs-proxy/internal/version.Version='$(1) \
	-o $(NODE_DIR)/ipvs-proxy ./cmd/ipvs-proxy
$(GO) run ./tools/ociimage build -layout $(NODE_DIR)/oci -tag $(1) -platform amd64=$(NODE_DIR)/rootfs-amd64.tar,$(NODE_DIR)/ipvs-proxy
tar --sort=name --owner=0 --group=0 --numeric-owner -C $(NODE_DIR)/oci -cf $(NODE_DIR)/ipvs-proxy-$(1)-oci.tar .
endef

node-release-image:
	mkdir -p $(NODE_DIR)
	bash scripts/release-rootfs.sh amd64 $(NODE_DIR)/rootfs-amd64.tar
	$(call node_release_image,$(VERSION))

# The release image twice (the second as the rollout's new version), and the
# kube-proxy image's root file system: the release image's packages and
# ipset, which kube-proxy's IPVS mode runs.
node-image: node-release-image
	IMAGE_PACKAGES='base-files base-passwd bash coreutils dash dpkg grep iptables ipset kmod' \
		bash scripts/release-rootfs.sh amd64 $(NODE_DIR)/rootfs-kube-proxy-amd64.tar
	$(call node_release_image,$(ROLLOUT_TAG))

test-node: deps kubelet agnhost helm kube-proxy node-deps node-image
	cd test/e2e && NODE_KUBELET_BIN=$(KUBELET_BIN) NODE_KUBE_PROXY_BIN=$(KUBE_PROXY_BIN) \
		NODE_AGNHOST_BIN=$(AGNHOST_BIN) NODE_HELM_BIN=$(HELM_BIN) \
		NODE_RELEASE_IMAGE=$(CURDIR)/$(NODE_DIR)/ipvs-proxy-$(VERSION)-oci.tar \
		NODE_ROLLOUT_IMAGE=$(CURDIR)/$(NODE_DIR)/ipvs-proxy-$(ROLLOUT_TAG)-oci.tar NODE_ROLLOUT_TAG=$(ROLLOUT_TAG) \
		NODE_KUBE_PROXY_ROOTFS=$(CURDIR)/$(NODE_DIR)/rootfs-kube-proxy-amd64.tar \
		$(GO) test -count=1 -vet=off -v -timeout 40m -run '^TestNode$$' $(NODE_TEST_FLAGS) ./node

OPT_IN += test-node(all-four-scenarios-on-the-real-kubelet-in-the-VM)

test-node-install: deps kubelet agnhost node-deps node-release-image
	cd test/e2e && NODE_KUBELET_BIN=$(KUBELET_BIN) NODE_AGNHOST_BIN=$(AGNHOST_BIN) \
		NODE_RELEASE_IMAGE=$(CURDIR)/$(NODE_DIR)/ipvs-proxy-$(VERSION)-oci.tar \
		$(GO) test -count=1 -vet=off -v -timeout 20m -run '^TestNode$$/^install$$' ./node

TEST_TARGETS += test-node-install

.DEFAULT_GOAL := $(node_default_goal)
