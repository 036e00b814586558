# mk/migdoc.mk: docs/migration.md run as a test.
# Included by the top Makefile (`-include mk/*.mk`).
#
#   make kubectl             build kubectl v1.34.4 once into .cache/kubectl
#                            (scripts/build-k8s.sh kubectl; its kustomize is
#                            the one `kubectl apply -k` runs)
#   make test-migration-doc  the guide's marked blocks, as written, in one
#                            walk on make test-node's real node under
#                            traffic (TestMigrationDoc in test/e2e/node;
#                            docs/testing.md)
#
# Not in `make test`: it needs make test-node's kubelet and images, and one
# VM boot of about 25 minutes (each of the walk's pod changes takes one to
# three minutes in the emulated VM). The parser and the guide's markers are
# checked in `make test` (TestMigrationGuideBlocks).

# Keep the including Makefile's default goal whatever the include order.
migdoc_default_goal := $(.DEFAULT_GOAL)

# node.mk, included after this file, sets the rest (K8S_VERSION too, with ?=).
K8S_VERSION ?= v1.34.4
KUBECTL_BIN  = $(CURDIR)/.cache/kubectl/kubectl-$(K8S_VERSION)

.PHONY: kubectl test-migration-doc
kubectl:
	GO='$(GO)' K8S_VERSION=$(K8S_VERSION) bash scripts/build-k8s.sh kubectl

test-migration-doc: deps kubelet agnhost kube-proxy kubectl node-deps node-image
	cd test/e2e && NODE_KUBELET_BIN=$(KUBELET_BIN) NODE_KUBE_PROXY_BIN=$(KUBE_PROXY_BIN) NODE_KUBECTL_BIN=$(KUBECTL_BIN) NODE_AGNHOST_BIN=$(AGNHOST_BIN) \
		NODE_RELEASE_IMAGE=$(CURDIR)/$(NODE_DIR)/ipvs-proxy-$(VERSION)-oci.tar \
		NODE_KUBE_PROXY_ROOTFS=$(CURDIR)/$(NODE_DIR)/rootfs-kube-proxy-amd64.tar \
		$(GO) test -count=1 -vet=off -v -timeout 45m -run '^TestMigrationDoc$$' ./node

OPT_IN += test-migration-doc(runs-the-guide-on-the-real-node-of-test-node-in-the-VM)

.DEFAULT_GOAL := $(migdoc_default_goal)
