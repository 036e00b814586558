# mk/node.mk: the shipped DaemonSet on a real kubelet (issue 38, item 4).
# Included by the top Makefile (`-include mk/*.mk`).
#
#   make kubelet      build the kubelet v1.34.4 once into .cache/kubelet
#                     (scripts/build-k8s.sh kubelet; a no-op when present)
#   make node-image   the release image for linux/amd64 only, as `make
#                     release` assembles it (scripts/release-rootfs.sh's
#                     Debian root file system, tools/ociimage), as one OCI
#                     layout tar in $(NODE_DIR); needs root and the Debian
#                     mirror once (the root file system is cached)
#   make test-node    in the test VM, Debian's containerd, runc and CNI
#                     plugins and that kubelet form a node of the host's test
#                     API server; the replace-kube-proxy overlay's DaemonSet
#                     runs there from the imported image and serves a
#                     ClusterIP (TestNode in test/e2e/node; docs/testing.md)
#
# Not in `make test`: it builds the kubelet (minutes of CPU once) and boots
# the VM for several minutes; docs/testing.md has the figures.

# Keep the including Makefile's default goal whatever the include order.
node_default_goal := $(.DEFAULT_GOAL)

GO          ?= go
K8S_VERSION ?= v1.34.4
KUBELET_BIN := $(CURDIR)/.cache/kubelet/kubelet-$(K8S_VERSION)
NODE_DIR    ?= .cache/node
# Debian bookworm's: containerd 1.6 serves the CRI v1 API that kubelet
# v1.34 requires (it falls back to its own cgroupDriver setting where 1.6
# lacks the RuntimeConfig call of containerd 2).
NODE_PKGS   := containerd runc containernetworking-plugins

.PHONY: kubelet node-deps node-image test-node
kubelet:
	GO='$(GO)' K8S_VERSION=$(K8S_VERSION) bash scripts/build-k8s.sh kubelet

node-deps:
	@dpkg-query -W $(NODE_PKGS) >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(NODE_PKGS) >/dev/null; }
	@dpkg-query -W -f='node-deps: $${Package} $${Version}\n' $(NODE_PKGS)

node-image:
	mkdir -p $(NODE_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(NODE_DIR)/ipvs-proxy ./cmd/ipvs-proxy
	bash scripts/release-rootfs.sh amd64 $(NODE_DIR)/rootfs-amd64.tar
	$(GO) run ./tools/ociimage build -layout $(NODE_DIR)/oci -tag $(VERSION) -platform amd64=$(NODE_DIR)/rootfs-amd64.tar,$(NODE_DIR)/ipvs-proxy
	tar --sort=name --owner=0 --group=0 --numeric-owner -C $(NODE_DIR)/oci -cf $(NODE_DIR)/ipvs-proxy-oci.tar .

test-node: deps kubelet node-deps node-image
	cd test/e2e && NODE_KUBELET_BIN=$(KUBELET_BIN) NODE_RELEASE_IMAGE=$(CURDIR)/$(NODE_DIR)/ipvs-proxy-oci.tar \
		$(GO) test -count=1 -vet=off -v -timeout 40m -run '^TestNode$$' ./node

OPT_IN += test-node(builds-the-kubelet-and-runs-it-in-the-VM)

.DEFAULT_GOAL := $(node_default_goal)
