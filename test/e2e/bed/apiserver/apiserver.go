package apiserver

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// GuestHostIP is the address at which the test VM reaches the host's
// forwarded port (qemu user networking's guestfwd). The serving certificate
// is valid for it.
const GuestHostIP = "10.0.2.100"

// DefaultServiceClusterIPRange is the dual-stack Service CIDR the server
// allocates ClusterIPs from. It stays clear of qemu's 10.0.2.0/24, so no
// ClusterIP can shadow GuestHostIP inside the VM.
const DefaultServiceClusterIPRange = "10.96.0.0/16,fd00:10:96::/112"

// AdminUser is the user name of the admin client certificate; it is in the
// system:masters group, which RBAC allows everything.
const AdminUser = "ipvs-proxy-e2e-admin"

// ErrStart is wrapped by every error New returns.
var ErrStart = errors.New("start test API server")

// Options configure a server. The zero value is valid.
type Options struct {
	// ServiceClusterIPRange is passed as --service-cluster-ip-range;
	// empty means DefaultServiceClusterIPRange.
	ServiceClusterIPRange string
	// ExtraFlags are appended to the kube-apiserver flags, after the
	// defaults, so they override them (for example --feature-gates=...).
	ExtraFlags []string
}

// Server is a running kube-apiserver with its etcd. Its fields are read-only.
type Server struct {
	// URL is the host's view of the server: https://127.0.0.1:Port.
	URL string
	// Port is the TCP port on 127.0.0.1; the VM runner forwards it.
	Port int
	// CAData is the PEM certificate of the CA that signed the serving
	// certificate.
	CAData []byte
	// Kubeconfig is the path of a kubeconfig file for the admin at URL.
	Kubeconfig string
	// Dir is the temporary directory holding etcd data, certificates and
	// kubeconfig files; Stop removes it.
	Dir string

	admin    *rest.Config
	tb       *serverTB
	etcd     *embed.Etcd
	teardown func()
	stopOnce sync.Once
}

// Start starts a server for tb and stops it when tb's test finishes. It fails
// tb if the server does not start.
func Start(tb testing.TB, opts ...Options) *Server {
	tb.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

var (
	sharedMu  sync.Mutex
	shared    *Server
	sharedErr error
)

// Shared returns the test package's one server, starting it on first use
// with default Options. It fails tb if the server does not start. RunMain
// stops it after all tests ran.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = New(Options{})
	}
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// RunMain runs the package's tests and stops the shared server, if one was
// started. Use it as os.Exit(apiserver.RunMain(m)) in TestMain.
func RunMain(m *testing.M) int {
	code := m.Run()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Stop()
	}
	return code
}

// New starts etcd and kube-apiserver on 127.0.0.1 and waits until the
// server is healthy and the default namespace exists. The caller must call
// Stop.
func New(opts Options) (_ *Server, err error) {
	dir, err := os.MkdirTemp("", "ipvs-proxy-e2e-apiserver-")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	s := &Server{Dir: dir, tb: &serverTB{log: logOutput(), tempDir: dir}}
	defer func() {
		if err != nil {
			s.Stop()
			err = fmt.Errorf("%w: %w", ErrStart, err)
		}
	}()

	clientURL, err := s.startEtcd()
	if err != nil {
		return nil, err
	}

	pki, err := s.writePKI()
	if err != nil {
		return nil, err
	}

	cidr := opts.ServiceClusterIPRange
	if cidr == "" {
		cidr = DefaultServiceClusterIPRange
	}
	flags := []string{
		// As every kubeadm cluster: the proxy's DaemonSet is privileged.
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=" + cidr,
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.clientCA,
	}
	flags = append(flags, opts.ExtraFlags...)

	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{clientURL}

	ts, err := s.startAPIServer(flags, storage)
	if err != nil {
		return nil, err
	}
	s.teardown = ts.TearDownFn
	s.Port = ts.ServerOpts.SecureServing.BindPort
	s.URL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	s.CAData = pki.ca.certPEM
	s.admin = &rest.Config{
		Host: s.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pki.ca.certPEM,
			CertData: pki.admin.certPEM,
			KeyData:  pki.admin.keyPEM,
		},
		QPS:   1000,
		Burst: 10000,
	}
	s.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := s.WriteKubeconfig(s.Kubeconfig, s.admin, ""); err != nil {
		return nil, err
	}
	if err := s.checkAdmin(); err != nil {
		return nil, err
	}
	return s, nil
}

// startEtcd starts an embedded single-member etcd on loopback ports and
// returns its client URL.
func (s *Server) startEtcd() (string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Name = "e2e"
	cfg.Dir = filepath.Join(s.Dir, "etcd")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true // test data; durability does not matter
	cfg.LogLevel = "error"
	if !verbose() {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", fmt.Errorf("start etcd: %w", err)
	}
	s.etcd = e
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return "", fmt.Errorf("etcd: %w", err)
	case <-time.After(time.Minute):
		return "", errors.New("etcd not ready after a minute")
	}
	return clientURL.String(), nil
}

// pkiFiles are the certificates the server is started with.
type pkiFiles struct {
	ca, admin                         *keyPair
	servingCert, servingKey, clientCA string
}

// writePKI makes one CA that signs both the serving certificate and client
// certificates, and writes the files kube-apiserver reads.
func (s *Server) writePKI() (*pkiFiles, error) {
	ca, err := newCA("ipvs-proxy-e2e-ca")
	if err != nil {
		return nil, err
	}
	serving, err := newServingCert(ca,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(GuestHostIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	admin, err := newClientCert(ca, AdminUser, []string{"system:masters"})
	if err != nil {
		return nil, err
	}
	p := &pkiFiles{
		ca:          ca,
		admin:       admin,
		servingCert: filepath.Join(s.Dir, "serving.crt"),
		servingKey:  filepath.Join(s.Dir, "serving.key"),
		clientCA:    filepath.Join(s.Dir, "ca.crt"),
	}
	if err := serving.writeFiles(p.servingCert, p.servingKey); err != nil {
		return nil, err
	}
	if err := ca.writeFiles(p.clientCA, ""); err != nil {
		return nil, err
	}
	return p, nil
}

// startAPIServer runs StartTestServer, turning its Fatal panics into errors.
func (s *Server) startAPIServer(flags []string, storage *storagebackend.Config) (ts kubeapiservertesting.TestServer, err error) {
	defer func() {
		if r := recover(); r != nil {
			rerr, ok := r.(error)
			if !ok || !errors.Is(rerr, errFatal) {
				panic(r)
			}
			err = rerr
		}
	}()
	ts, err = kubeapiservertesting.StartTestServer(s.tb, kubeapiservertesting.NewDefaultTestServerOptions(), flags, storage)
	if err != nil {
		return ts, fmt.Errorf("start kube-apiserver: %w", err)
	}
	return ts, nil
}

// checkAdmin proves the admin credential works through the serving
// certificate, not just the in-process loopback client.
func (s *Server) checkAdmin() error {
	c, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("admin get namespace default at %s: %w", s.URL, err)
	}
	return nil
}

// Stop stops kube-apiserver and etcd and removes Dir. It is safe to call
// more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.teardown != nil {
			s.teardown()
		}
		s.tb.runCleanups()
		if s.etcd != nil {
			s.etcd.Close()
		}
		_ = os.RemoveAll(s.Dir)
	})
}

// Config returns a new copy of the admin's client config for URL.
func (s *Server) Config() *rest.Config { return rest.CopyConfig(s.admin) }

// GuestURL is the server's URL as the test VM sees it through the forwarded
// port: https://10.0.2.100:Port.
func (s *Server) GuestURL() string {
	return "https://" + net.JoinHostPort(GuestHostIP, strconv.Itoa(s.Port))
}

// TokenLifetime is how long ServiceAccountConfig's tokens are valid: longer
// than any run that holds one. `make bench-vs-kube-proxy` at 20,000
// services holds its proxies' tokens through the objects' creation and
// kube-proxy's budget of an hour or more before ipvs-proxy starts; with
// tokens of an hour (until 2026-12-02), ipvs-proxy then met Unauthorized
// on every list.
const TokenLifetime = 12 * time.Hour

// ServiceAccountConfig returns a client config that authenticates as the
// ServiceAccount namespace/name with a bound token from the TokenRequest API
// (valid for TokenLifetime), creating the namespace and the ServiceAccount if they
// do not exist. The config has exactly the permissions RBAC grants that
// ServiceAccount (and system:serviceaccounts, system:authenticated).
func (s *Server) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	c, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := c.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create serviceaccount %s/%s: %w", namespace, name, err)
	}
	expiration := int64(TokenLifetime / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiration}}
	tr, err = c.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CAData},
	}, nil
}

// freePorts returns n distinct TCP ports that were free on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ServingCertificate returns the certificate the server presents, read back
// from its file.
func (s *Server) ServingCertificate() (*x509.Certificate, error) {
	data, err := os.ReadFile(filepath.Join(s.Dir, "serving.crt"))
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("serving certificate %s: no PEM block", s.Dir)
	}
	return x509.ParseCertificate(block.Bytes)
}
