// Package soak is the churn soak test at the planner and applier
// level: thousands of services changing at random (create, delete, scale
// endpoints, change ports, traffic policies, session affinity, schedulers,
// NodePorts and externalIPs, hostile ones included) are planned and applied
// to a real kernel in a fresh network namespace, while real traffic flows to
// a fixed set of services that are never changed. After every sync an
// invariant monitor compares the kernel with the plan (IPVS and kube-ipvs0)
// and checks that no protected address is bound; a netlink subscriber
// catches any protected address that appears even between two checks.
//
// It needs the VM kernel (build tag kernel):
//
//	cd test/e2e && go test -c -tags kernel -o /tmp/soak.test ./soak
//	go run ./test/vmtest/cmd/vmrun -env SOAK_DURATION=60s -- /tmp/soak.test -test.v
//
// Environment: SOAK_DURATION (default 20s of churn), SOAK_SERVICES
// (default 10000), SOAK_SEED (default 1), SOAK_FULL_EVERY (a full resync
// every N syncs, default 10), SOAK_CHANGES (services changed per sync, at
// most; default 20). The report (failed requests, invariant findings, sync
// latency percentiles, memory over time) is logged between the markers
// SOAK-REPORT-BEGIN and SOAK-REPORT-END; docs/reliability.md keeps the
// latest figures. The package never touches the host's own network
// namespace.
package soak
