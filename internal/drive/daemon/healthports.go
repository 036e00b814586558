package daemon

import (
	"cmp"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/health"
)

// healthPort is a healthCheckNodePort server one service port asks for.
type healthPort struct {
	port     uint16
	svc      model.ServicePortName
	localEPs []netip.Addr
}

// serviceHealth lists the healthCheckNodePort servers a service's ports
// ask for on node: ports with externalTrafficPolicy: Local and a health
// check node port, each with its ready endpoints on this node.
func serviceHealth(ports []model.ServicePort, eps map[model.ServicePortName][]model.Endpoint, node string) []healthPort {
	var out []healthPort
	for i := range ports {
		sp := &ports[i]
		if !sp.ExternalPolicyLocal || sp.HealthCheckNodePort == 0 {
			continue
		}
		hp := healthPort{port: sp.HealthCheckNodePort, svc: sp.Name}
		for _, ep := range eps[sp.Name] {
			if ep.Ready && ep.NodeName == node {
				hp.localEPs = append(hp.localEPs, ep.Address)
			}
		}
		out = append(out, hp)
	}
	return out
}

// mergeHealth is the servers of every service: one per port, named after
// the first service (by namespace, name) that asks for it, answering with
// the distinct local endpoints of all that do.
func mergeHealth(bySvc map[types.NamespacedName][]healthPort) map[uint16]health.ServiceHealth {
	var all []healthPort
	for _, hps := range bySvc {
		all = append(all, hps...)
	}
	slices.SortStableFunc(all, func(a, b healthPort) int {
		if c := cmp.Compare(a.svc.Namespace, b.svc.Namespace); c != 0 {
			return c
		}
		return cmp.Compare(a.svc.Name, b.svc.Name)
	})
	out := map[uint16]health.ServiceHealth{}
	local := map[uint16]map[netip.Addr]bool{}
	for _, hp := range all {
		if _, ok := out[hp.port]; !ok {
			out[hp.port] = health.ServiceHealth{Namespace: hp.svc.Namespace, Name: hp.svc.Name}
			local[hp.port] = map[netip.Addr]bool{}
		}
		for _, a := range hp.localEPs {
			local[hp.port][a] = true
		}
	}
	for p, h := range out {
		h.LocalEndpoints = len(local[p])
		out[p] = h
	}
	return out
}

// HealthCheckPorts returns the healthCheckNodePort servers the cluster
// needs on node: one per Service with externalTrafficPolicy: Local and a
// health check node port, with its ready endpoints on this node.
func HealthCheckPorts(c model.Cluster, node string) map[uint16]health.ServiceHealth {
	bySvc := map[types.NamespacedName][]healthPort{}
	for i := range c.Services {
		k := c.Services[i].Name.NamespacedName
		bySvc[k] = append(bySvc[k], serviceHealth(c.Services[i:i+1], c.Endpoints, node)...)
	}
	return mergeHealth(bySvc)
}
