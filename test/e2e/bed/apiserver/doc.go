// Package apiserver runs a real kube-apiserver with an embedded etcd inside
// the test process, for the API-server tests of ipvs-proxy.
//
// It owns only what it starts: one etcd (embed) and one kube-apiserver
// (k8s.io/kubernetes/cmd/kube-apiserver/app/testing.StartTestServer), both
// listening on 127.0.0.1 only, plus a temporary directory with their data,
// certificates and kubeconfig files. It never touches a real cluster, the
// user's ~/.kube, or any address other than loopback.
//
// The server authorizes with Node,RBAC, so a client that lacks an RBAC rule
// sees a Forbidden error. Three kinds of credentials are handed out:
//
//   - the admin (a client certificate in group system:masters): Server.Config
//     and the kubeconfig file at Server.Kubeconfig;
//   - a ServiceAccount's bound token: Server.ServiceAccountConfig, limited by
//     whatever Roles and ClusterRoles the test binds to that ServiceAccount;
//   - any of the above as a kubeconfig file for another server address, for
//     example the test VM's view of the forwarded port: Server.WriteKubeconfig
//     with Server.GuestURL.
//
// The serving certificate is valid for 127.0.0.1, ::1, localhost and
// GuestHostIP (10.0.2.100, where the test VM reaches the forwarded port), so
// clients verify it against Server.CAData without disabling TLS checks.
//
// There is no controller-manager: tests write EndpointSlices and Node objects
// themselves, and ServiceAccounts get no token Secrets (use
// ServiceAccountConfig, which calls the TokenRequest API).
//
// Typical use, one server per test package:
//
//	func TestMain(m *testing.M) { os.Exit(apiserver.RunMain(m)) }
//
//	func TestSomething(t *testing.T) {
//		srv := apiserver.Shared(t)
//		client := kubernetes.NewForConfigOrDie(srv.Config())
//		...
//	}
//
// Set IPVS_E2E_APISERVER_LOG=1 to see the kube-apiserver and etcd logs on
// stderr; by default they are discarded.
package apiserver
