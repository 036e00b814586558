package apiserver

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrNoCredential is returned by WriteKubeconfig for a config that carries
// neither a bearer token nor a client certificate in memory.
var ErrNoCredential = errors.New("config has no token or client certificate data")

// WriteKubeconfig writes cfg's credentials as a self-contained kubeconfig
// file at path (certificates embedded, context "e2e"). server replaces
// cfg.Host when non-empty, for example GuestURL() for a client in the VM;
// the serving certificate is valid for that address too.
func (s *Server) WriteKubeconfig(path string, cfg *rest.Config, server string) error {
	if server == "" {
		server = cfg.Host
	}
	if cfg.BearerToken == "" && len(cfg.CertData) == 0 {
		return fmt.Errorf("kubeconfig %s: %w", path, ErrNoCredential)
	}
	caData := cfg.CAData
	if len(caData) == 0 {
		caData = s.CAData
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	kc.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e", Namespace: "default"}
	kc.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// WriteGuestKubeconfigs writes the two kubeconfigs a VM suite hands its
// guest into dir: admin.kubeconfig (the server's admin credentials at
// GuestURL, for the guest test itself) and proxy.kubeconfig (proxy's
// credentials at URL, 127.0.0.1:PORT, which the guest relays to the
// forwarded port inside each node namespace), and returns their paths.
func (s *Server) WriteGuestKubeconfigs(t testing.TB, dir string, proxy *rest.Config) (admin, proxyPath string) {
	t.Helper()
	admin, proxyPath = filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "proxy.kubeconfig")
	if err := s.WriteKubeconfig(admin, s.Config(), s.GuestURL()); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteKubeconfig(proxyPath, proxy, s.URL); err != nil {
		t.Fatal(err)
	}
	return admin, proxyPath
}
