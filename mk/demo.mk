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

# Each build says what it builds and how long; `go: downloading` and the
# compiler's output go to .cache/logs/ (scripts/build-step.sh).
.PHONY: demo demo-build
demo-build:
	@bash scripts/build-step.sh $(BIN) "the proxy" "~1 min the first time, seconds after" -- \
		$(MAKE) --no-print-directory build
	@bash scripts/build-step.sh $(DEMO_GUEST) "the demo's program inside the VM" "~1 min the first time" -- \
		sh -c 'cd test/e2e && $(GO) build -o ../../$(DEMO_GUEST) ./demo/guest'
	@bash scripts/build-step.sh $(DEMO_BIN) "the demo's host program, with kube-apiserver and etcd built in (k8s.io/kubernetes)" \
		"~4 min on 2 cores the first time, seconds once the Go build cache has it" -- \
		sh -c 'cd test/e2e && $(GO) build -o ../../$(DEMO_BIN) ./demo'

demo: deps demo-build
	@echo "demo: starting; the VM boots in 15-60 s, then each step prints as it runs (about 2 min in all)" >&2
	$(DEMO_BIN) -proxy $(BIN) -guest $(DEMO_GUEST) -deploy deploy/base $(DEMO_FLAGS)
