# ipvs-proxy build and test entry points. `make test` is what CI runs.
GO      ?= go
BIN     := bin/ipvs-proxy
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/ipvs-proxy/ipvs-proxy/internal/version.Version=$(VERSION)

.PHONY: build test test-unit lint
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ipvs-proxy

test: test-unit

test-unit:
	$(GO) test -race -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...
