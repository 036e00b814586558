# syntax=docker/dockerfile:1
#
# ipvs-proxy image: one static binary on a small Debian userland with the
# iptables/ipvsadm tools the proxy and an operator on the node need.
#
#   docker build --build-arg VERSION=v$(cat VERSION) \
#     -t ghcr.io/ipvs-proxy/ipvs-proxy:v$(cat VERSION) .
#
# The same binary is copied to the host by the DaemonSet's init container
# (/opt/ipvs-proxy/bin/ipvs-proxy), so it must stay static: CGO_ENABLED=0,
# no libc, runnable on any Linux node from a serial console.

ARG GO_VERSION=1.26

# ---- build ------------------------------------------------------------------
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH
# .git is not in the build context (.dockerignore); the Makefile passes the
# version it computed with `git describe`.
ARG VERSION=dev
WORKDIR /src
# Dependencies first, so a source change does not re-download modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The Makefile's build: CGO_ENABLED=0, -trimpath, -s -w, version stamped.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags "-s -w -X github.com/ipvs-proxy/ipvs-proxy/internal/version.Version=${VERSION}" \
      -o /out/ipvs-proxy ./cmd/ipvs-proxy
# Refuse to ship a binary that is not static: the init container installs it
# on hosts whose libc we know nothing about.
RUN if ldd /out/ipvs-proxy >/dev/null 2>&1; then echo "ipvs-proxy is not static" >&2; exit 1; fi

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim
# The packages of `make release`'s image (scripts/release-rootfs.sh), plus
# ipvsadm and conntrack for operators:
# iptables  iptables-nft and iptables-legacy (+ -save/-restore, ip6tables)
# ipvsadm   `ipvsadm -Ln` / `ipvsadm -S -n` for operators
# kmod      modprobe/lsmod (with the host's /lib/modules mounted read-only)
# conntrack `conntrack -L` for debugging
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables ipvsadm kmod conntrack \
 && rm -rf /var/lib/apt/lists/*
# The iptables wrapper picks, at first use inside the container, the backend
# (nft or legacy) the host's kubelet already uses, and points the
# iptables/ip6tables alternatives at it: rules written through the other
# backend would be invisible to, and fight with, the rest of the node.
COPY deploy/image/iptables-wrapper /usr/sbin/iptables-wrapper
RUN for fam in iptables ip6tables; do \
      update-alternatives --install /usr/sbin/$fam $fam /usr/sbin/iptables-wrapper 100 \
        --slave /usr/sbin/$fam-restore $fam-restore /usr/sbin/iptables-wrapper \
        --slave /usr/sbin/$fam-save $fam-save /usr/sbin/iptables-wrapper \
      && update-alternatives --set $fam /usr/sbin/iptables-wrapper; \
    done \
 && iptables-legacy --version && iptables-nft --version
COPY --from=build /out/ipvs-proxy /usr/local/bin/ipvs-proxy
# Under the name kube-proxy it is `ipvs-proxy run` with kube-proxy's command
# line, so kube-proxy's own DaemonSet runs it once its image is swapped.
RUN ln -s ipvs-proxy /usr/local/bin/kube-proxy
ENTRYPOINT ["/usr/local/bin/ipvs-proxy"]
CMD ["run"]
