# mk/demo.mk: `make demo` — the proxy on a real kernel (the test VM) against
# a real API server (in-process, loopback), replaying the seed articles'
# scenarios and the recovery of a node whose address was bound by hand.
# Output: docs/demo.md. Included by the top Makefile (-include mk/*.mk).
#
#   make demo                    deps, build, then test/e2e/demo
#   make demo DEMO_FLAGS=-timeout=20m
#
# The host program (test/e2e/demo) starts the API server and boots the VM;
# the guest program (test/e2e/demo/guest) runs inside it as root.
DEMO_BIN   := bin/demo
DEMO_GUEST := bin/demo-guest
DEMO_FLAGS ?=

.PHONY: demo demo-build
demo-build: build
	cd test/e2e && $(GO) build -o ../../$(DEMO_GUEST) ./demo/guest
	cd test/e2e && $(GO) build -o ../../$(DEMO_BIN) ./demo

demo: deps demo-build
	$(DEMO_BIN) -proxy $(BIN) -guest $(DEMO_GUEST) -rbac deploy/base/rbac.yaml $(DEMO_FLAGS)
