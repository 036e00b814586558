// Package daemonsoak is the daemon soak (`make daemon-soak`,
// docs/reliability.md): the real `ipvs-proxy run` in a node namespace of
// the test VM, driven from the API server on the host (package
// bed/apiserver) through the bed of package bed/churn, against thousands
// of Services churned for minutes (Services deleted and re-created, a Node
// created and deleted), with requests to a steady Service throughout. After
// every DSOAK_CHECK of churn the churn pauses, the kernel must equal what
// `ipvs-proxy plan` prints for the same objects, and the proxy's memory and
// goroutines are sampled: they must stay flat.
//
// Two halves: TestDaemonSoak (host) starts the API server, builds the proxy
// and this package's kernel test binary and boots the VM; TestDaemonSoakGuest
// (build tag kernel, in the VM) does the rest. It runs only with DSOAK=1.
// Environment: DSOAK_SERVICES, DSOAK_ENDPOINTS, DSOAK_DURATION, DSOAK_CHECK,
// DSOAK_SEED, DSOAK_PROFILES (a directory for the proxy's heap profile at
// every check). The report is logged between DSOAK-REPORT-BEGIN and
// DSOAK-REPORT-END.
package daemonsoak
