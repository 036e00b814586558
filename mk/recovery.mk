# mk/recovery.mk: the recovery kernel tests (internal/drive/recovery) execute the
# real ipvs-proxy binary inside the VM's node namespaces, so `make
# test-kernel` builds it (bin/ipvs-proxy) before the VM boots.
# Included by the top Makefile (-include mk/*.mk).
test-kernel: build
