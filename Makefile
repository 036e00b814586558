# ipvs-proxy build and test entry points. `make test` is what CI runs
# (.ci/run: `make lint && make test` on a fresh Debian machine as root).
#
#   make test          test-unit, test-kernel, then whatever fragments add
#   make test-unit     go test -race ./... of the main module, on the host
#   make test-kernel   every *_kernel_test.go package in ONE boot of the test VM
#   make deps          qemu, ipvsadm, ipset, ... and the VM kernel (.cache/vm)
#   make lint          gofmt + go vet (also with -tags kernel)
#
# Helpers add their own targets in mk/*.mk (and test/e2e/e2e.mk), appending
# to TEST_TARGETS to put them under `make test`; see docs/testing.md.
GO      ?= go
BIN     := bin/ipvs-proxy
# The release version: the VERSION file (SemVer, no "v"), tagged v$(VERSION)
# in git, the binary's `version`, the image tag and the chart's appVersion
# (internal/version's TestVersionsAgree checks they agree).
VERSION := v$(strip $(file < VERSION))
LDFLAGS := -s -w -X github.com/ipvs-proxy/ipvs-proxy/internal/version.Version=$(VERSION)

# One build variant for everything but the race build: vet, the binary, the
# kernel tests' binaries, the e2e tests and the guest binaries they build
# (test/e2e/bed/gobuild) all compile static and without -trimpath, so a cold
# CI machine compiles client-go, the API server and their dependencies once
# instead of once per variant (cgo on/off and -trimpath each change every
# package's cache key). `make release` sets its own flags.
export CGO_ENABLED := 0

# Run in this order by `make test`; fragments append (TEST_TARGETS += test-x).
TEST_TARGETS := test-unit test-kernel
# Targets `make test` leaves out, each "target(why)"; fragments append, and
# the summary line at the end of `make test` names them.
OPT_IN :=

.PHONY: build test test-unit test-kernel deps lint
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ipvs-proxy

# Idempotent: does nothing when every package and the kernel are present.
deps:
	bash scripts/install-deps.sh

# The binary first: docscheck reads its `run --help` (IPVS_PROXY_BIN) rather
# than compile it again while the race builds compete for the cores.
# -vet=off: `make lint` has vetted every package with the full analyzer set.
test-unit: deps build
	CGO_ENABLED=1 IPVS_PROXY_BIN=$(CURDIR)/$(BIN) $(GO) test -race -vet=off -count=1 ./...

# KERNEL_PKGS, KERNEL_TEST_FLAGS and VMRUN_FLAGS narrow or extend the run:
#   make test-kernel KERNEL_PKGS=./ipvs/ KERNEL_TEST_FLAGS=-test.run=TestReconcile
test-kernel: deps
	GO='$(GO)' KERNEL_PKGS='$(KERNEL_PKGS)' KERNEL_TEST_FLAGS='$(KERNEL_TEST_FLAGS)' \
		VMRUN_FLAGS='$(VMRUN_FLAGS)' bash scripts/test-kernel.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags kernel ./...
	GOOS=darwin $(GO) vet ./cmd/ipvs-proxy ./internal/decide/planner ./internal/decide/guard ./internal/decide/model ./ipvs ./iptables
	@$(MAKE) --no-print-directory vet-e2e

-include test/e2e/e2e.mk
-include mk/*.mk

# After the includes: the prerequisites are the final TEST_TARGETS.
test: $(TEST_TARGETS)
	@echo "make test: passed: $(TEST_TARGETS); not in make test (run them by name): $(or $(strip $(OPT_IN)),none)"
