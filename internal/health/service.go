package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"go.uber.org/zap"
)

// ServiceHealth is what one healthCheckNodePort server reports.
type ServiceHealth struct {
	// Namespace and Name identify the Service.
	Namespace, Name string
	// LocalEndpoints is the number of ready endpoints on this node.
	LocalEndpoints int
}

// Services runs one HTTP server per healthCheckNodePort (services with
// externalTrafficPolicy: Local), answering as kube-proxy does:
// {"service":{"namespace":NS,"name":NAME},"localEndpoints":N}, 200 when N > 0
// and 503 otherwise. A port's server keeps running across updates; servers
// of ports no longer wanted are closed.
type Services struct {
	// ProxyHealthy, if set, is the proxy's health (Proxy.ServiceProxyHealthy):
	// every answer reports it as serviceProxyHealthy and is 503 while it is
	// false, as kube-proxy's. Set before the first Sync.
	ProxyHealthy func() bool

	log *zap.Logger
	// listen opens a listener on addr:port, on every address when addr
	// is the zero Addr; tests replace it.
	listen func(addr netip.Addr, port uint16) (net.Listener, error)

	mu      sync.Mutex
	servers map[uint16]*svcServer
	// addrs are where servers listen (Restrict); nil is every address.
	addrs []netip.Addr
}

type svcServer struct {
	// cancel closes every listener of the server; served is done when
	// they are closed.
	cancel       context.CancelFunc
	served       sync.WaitGroup
	proxyHealthy func() bool
	mu           sync.RWMutex
	h            ServiceHealth
}

// NewServices returns a manager of healthCheckNodePort servers listening on
// every address until Restrict says otherwise.
func NewServices(log *zap.Logger) *Services {
	if log == nil {
		log = zap.NewNop()
	}
	return &Services{log: log, listen: listenTCP, servers: map[uint16]*svcServer{}}
}

func listenTCP(addr netip.Addr, port uint16) (net.Listener, error) {
	if !addr.IsValid() {
		return net.Listen("tcp", ":"+strconv.Itoa(int(port)))
	}
	return net.Listen("tcp", netip.AddrPortFrom(addr, port).String())
}

// Restrict makes the servers listen on addrs only when restricted — the
// node addresses --nodeport-addresses leaves NodePorts on, as kube-proxy's
// do (kubernetes#82163) — and on every address otherwise. Restricted to no
// address, no server listens. Servers open elsewhere are closed now and
// reopened on the new addresses by the next Sync.
func (s *Services) Restrict(addrs []netip.Addr, restricted bool) {
	want := []netip.Addr(nil)
	if restricted {
		want = append(make([]netip.Addr, 0, len(addrs)), addrs...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if (want == nil) == (s.addrs == nil) && slices.Equal(want, s.addrs) {
		return
	}
	s.addrs = want
	for port, srv := range s.servers {
		srv.stop()
		delete(s.servers, port)
	}
	s.log.Info("health check node ports listen on", zap.Bool("everyAddress", want == nil), zap.Stringers("addresses", want))
}

// open opens port's listeners: one on every address, or one per
// restricted address. On error the ones opened are closed.
func (s *Services) open(port uint16) ([]net.Listener, error) {
	if s.addrs == nil {
		ln, err := s.listen(netip.Addr{}, port)
		if err != nil {
			return nil, err
		}
		return []net.Listener{ln}, nil
	}
	lns := make([]net.Listener, 0, len(s.addrs))
	for _, a := range s.addrs {
		ln, err := s.listen(a, port)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// Sync makes the running servers exactly the given ports. It returns the
// ports whose server could not be started (port in use); they are retried
// at the next Sync.
func (s *Services) Sync(want map[uint16]ServiceHealth) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for port, srv := range s.servers {
		if _, ok := want[port]; !ok {
			srv.stop()
			delete(s.servers, port)
			s.log.Info("closed health check node port", zap.Uint16("port", port))
		}
	}
	ports := make([]uint16, 0, len(want))
	for p := range want {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, port := range ports {
		h := want[port]
		if srv, ok := s.servers[port]; ok {
			srv.mu.Lock()
			srv.h = h
			srv.mu.Unlock()
			continue
		}
		lns, err := s.open(port)
		if err != nil {
			errs = append(errs, fmt.Errorf("health check node port %d for %s/%s: %w", port, h.Namespace, h.Name, err))
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		srv := &svcServer{cancel: cancel, h: h, proxyHealthy: s.ProxyHealthy}
		s.servers[port] = srv
		for _, ln := range lns {
			srv.served.Go(func() {
				if err := serveListener(ctx, ln, srv); err != nil {
					s.log.Warn("health check node port server stopped", zap.Uint16("port", port), zap.Error(err))
				}
			})
		}
		s.log.Info("opened health check node port", zap.Uint16("port", port),
			zap.String("service", h.Namespace+"/"+h.Name))
	}
	return errs
}

// stop closes the server's listeners and returns when they are closed, so
// that its port can be opened again at once.
func (srv *svcServer) stop() {
	srv.cancel()
	srv.served.Wait()
}

// Close stops every server.
func (s *Services) Close() {
	s.Sync(nil)
}

type svcBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (srv *svcServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	srv.mu.RLock()
	h := srv.h
	srv.mu.RUnlock()
	var b svcBody
	b.Service.Namespace, b.Service.Name, b.LocalEndpoints = h.Namespace, h.Name, h.LocalEndpoints
	b.ServiceProxyHealthy = srv.proxyHealthy == nil || srv.proxyHealthy()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(h.LocalEndpoints))
	if h.LocalEndpoints > 0 && b.ServiceProxyHealthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(b)
}
