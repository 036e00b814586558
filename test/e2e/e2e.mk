# test/e2e/e2e.mk: the end-to-end tests of the nested module test/e2e (a real
# kube-apiserver with an embedded etcd, in-process; the packages that need a
# kernel with IPVS boot the test VM through test/vmtest). Included by the
# top Makefile with `-include test/e2e/e2e.mk`; run from the repository root.
#
#   make test-e2e                                  every e2e package
#   make test-e2e E2E_PKGS=./deploy/               one package
#   make test-e2e E2E_TEST_FLAGS='-v -run RBAC'    extra `go test` flags
#
# The packages are compiled first with -p 2 (the cold build of
# k8s.io/kubernetes is ~10 min of CPU: half the wall time of -p 1 on CI's two
# cores), then tested with -p 1: each test package starts its own API server
# (about 300 MB and a core while it starts), some boot the VM.
GO             ?= go
E2E_DIR        := test/e2e
E2E_PKGS       ?= ./...
E2E_TEST_FLAGS ?=

# deps (the top Makefile's scripts/install-deps.sh: qemu and the VM kernel
# in .cache/vm, as for the kernel tests; a no-op when all is present) for the
# packages that boot the VM.
.PHONY: test-e2e vet-e2e
test-e2e: deps
	cd $(E2E_DIR) && $(GO) build -p 2 $(E2E_PKGS)
	cd $(E2E_DIR) && $(GO) test -count=1 -vet=off -p 1 -timeout 30m $(E2E_TEST_FLAGS) $(E2E_PKGS)

# Part of `make lint`: both halves of every package (the kernel build tag
# selects the guest halves that run in the VM).
vet-e2e:
	cd $(E2E_DIR) && $(GO) vet -p 2 ./...
	cd $(E2E_DIR) && $(GO) vet -p 2 -tags kernel ./...

TEST_TARGETS += test-e2e
