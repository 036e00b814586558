package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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
	// listen opens a listener; tests replace it.
	listen func(port uint16) (net.Listener, error)

	mu      sync.Mutex
	servers map[uint16]*svcServer
}

type svcServer struct {
	cancel       context.CancelFunc
	proxyHealthy func() bool
	mu           sync.RWMutex
	h            ServiceHealth
}

// NewServices returns a manager of healthCheckNodePort servers listening on
// every address (as kube-proxy, unless restricted by --nodeport-addresses).
func NewServices(log *zap.Logger) *Services {
	if log == nil {
		log = zap.NewNop()
	}
	return &Services{
		log:     log,
		listen:  func(port uint16) (net.Listener, error) { return net.Listen("tcp", ":"+strconv.Itoa(int(port))) },
		servers: map[uint16]*svcServer{},
	}
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
			srv.cancel()
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
		ln, err := s.listen(port)
		if err != nil {
			errs = append(errs, fmt.Errorf("health check node port %d for %s/%s: %w", port, h.Namespace, h.Name, err))
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		srv := &svcServer{cancel: cancel, h: h, proxyHealthy: s.ProxyHealthy}
		s.servers[port] = srv
		go func() {
			if err := serveListener(ctx, ln, srv); err != nil {
				s.log.Warn("health check node port server stopped", zap.Uint16("port", port), zap.Error(err))
			}
		}()
		s.log.Info("opened health check node port", zap.Uint16("port", port),
			zap.String("service", h.Namespace+"/"+h.Name))
	}
	return errs
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
