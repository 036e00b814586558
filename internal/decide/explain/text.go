package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// WriteJSON writes x as one indented JSON document.
func WriteJSON(w io.Writer, x *Explanation) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(x)
}

// WriteText writes x for a reader: per port its virtual servers, real
// servers and ipset entries, then its endpoints and each policy's choice,
// then the guard's verdicts, the refusals and the kernel's comparison.
// API values are written as model.Word and model.Line write them, so no
// value can add a line.
func WriteText(w io.Writer, x *Explanation) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Service %s on node %s\n", model.Word(x.Service), model.Word(x.Node))
	for i := range x.Ports {
		writePort(&b, &x.Ports[i])
	}
	b.WriteString("\nguard:\n")
	if len(x.Guard) == 0 {
		b.WriteString("  (no ClusterIP, externalIP or LoadBalancer IP)\n")
	}
	for _, v := range x.Guard {
		fmt.Fprintf(&b, "  %s (%s): ", v.Address, strings.Join(v.Fields, ", "))
		switch {
		case v.Protected:
			fmt.Fprintf(&b, "protected, %s: %s\n", v.Reason, model.Line(v.Detail))
		case v.Reason != "":
			fmt.Fprintf(&b, "not protected; warning %s: %s\n", v.Reason, model.Line(v.Detail))
		default:
			b.WriteString("not protected\n")
		}
	}
	b.WriteString("\nrefused:\n")
	if len(x.Refusals) == 0 {
		b.WriteString("  (nothing)\n")
	}
	for _, r := range x.Refusals {
		fmt.Fprintf(&b, "  %s %s %s: %s\n", model.Word(r.Field), model.Word(r.Address), model.Word(r.Reason), model.Line(r.Message))
	}
	if k := x.Kernel; k != nil {
		if k.Matches {
			b.WriteString("\nkernel: matches the plan\n")
		} else {
			fmt.Fprintf(&b, "\nkernel: differs from the plan (%d):\n", len(k.Differences))
			for _, d := range k.Differences {
				fmt.Fprintf(&b, "  %s\n", model.Line(d))
			}
		}
		for _, d := range k.Draining {
			fmt.Fprintf(&b, "  draining at weight 0 (no difference): %s\n", d)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writePort(b *strings.Builder, p *Port) {
	name := "(unnamed)"
	if p.Name != "" {
		name = model.Word(p.Name)
	}
	fmt.Fprintf(b, "\nport %s %s %d", name, p.Protocol, p.Port)
	if p.NodePort != 0 {
		fmt.Fprintf(b, " nodePort %d", p.NodePort)
	}
	if p.HealthCheckNodePort != 0 {
		fmt.Fprintf(b, " healthCheckNodePort %d", p.HealthCheckNodePort)
	}
	fmt.Fprintf(b, ": externalTrafficPolicy %s, internalTrafficPolicy %s\n", p.ExternalTrafficPolicy, p.InternalTrafficPolicy)
	if len(p.VirtualServers) == 0 {
		b.WriteString("  no virtual server\n")
	}
	for i := range p.VirtualServers {
		writeVirtualServer(b, &p.VirtualServers[i])
	}
	if len(p.Endpoints) > 0 {
		b.WriteString("  endpoints:\n")
	}
	for _, e := range p.Endpoints {
		fmt.Fprintf(b, "    %s %s", addrPort(e.Address, e.Port), conditions(&e))
		if e.Node != "" {
			fmt.Fprintf(b, " node %s", model.Word(e.Node))
		}
		if e.Zone != "" {
			fmt.Fprintf(b, " zone %s", model.Word(e.Zone))
		}
		fmt.Fprintf(b, ": Cluster policy %s; Local policy %s\n", choice(e.Cluster), choice(e.Local))
	}
	if len(p.Entries) > 0 {
		b.WriteString("  hairpin and health check entries:\n")
	}
	for _, e := range p.Entries {
		writeEntry(b, "    ", e)
	}
}

func writeVirtualServer(b *strings.Builder, v *VirtualServer) {
	fmt.Fprintf(b, "  %s %s %s %s %s", v.Kind, v.Family, v.Protocol, addrPort(v.Address, v.Port), v.Scheduler)
	if len(v.Flags) > 0 {
		fmt.Fprintf(b, " [%s]", strings.Join(v.Flags, ","))
	}
	if v.PersistenceTimeout != 0 {
		fmt.Fprintf(b, " timeout %ds", v.PersistenceTimeout)
	}
	if v.Bound {
		b.WriteString(", bound on kube-ipvs0")
	} else {
		b.WriteString(", a node address served at L4 (not on kube-ipvs0)")
	}
	switch v.Endpoints {
	case "local":
		b.WriteString(", this node's endpoints (Local policy)")
	case "local-fallback":
		b.WriteString(", no endpoint on this node (Local policy): the cluster's, for the node itself and its pods only")
	default:
		b.WriteString(", the cluster's endpoints")
	}
	b.WriteByte('\n')
	if v.ServedBy != "" {
		fmt.Fprintf(b, "    not programmed for this port: served by %s\n", model.Line(v.ServedBy))
		return
	}
	if len(v.RealServers) == 0 {
		b.WriteString("    no real server: connections are refused\n")
	}
	for _, rs := range v.RealServers {
		fmt.Fprintf(b, "    -> %s weight %d\n", addrPort(rs.Address, rs.Port), rs.Weight)
	}
	for _, e := range v.Entries {
		writeEntry(b, "    ", e)
	}
}

func writeEntry(b *strings.Builder, indent string, e Entry) {
	fmt.Fprintf(b, "%sipset %s %s", indent, e.Set, e.Entry)
	if len(e.Rules) > 0 {
		fmt.Fprintf(b, " (matched in %s)", strings.Join(e.Rules, ", "))
	}
	b.WriteByte('\n')
}

func addrPort(a string, port uint16) string {
	if strings.Contains(a, ":") {
		return "[" + a + "]:" + strconv.Itoa(int(port))
	}
	return a + ":" + strconv.Itoa(int(port))
}

func conditions(e *Endpoint) string {
	var cs []string
	for _, c := range []struct {
		on   bool
		name string
	}{{e.Ready, "ready"}, {e.Serving, "serving"}, {e.Terminating, "terminating"}} {
		if c.on {
			cs = append(cs, c.name)
		}
	}
	if len(cs) == 0 {
		return "(not ready, not serving)"
	}
	return "(" + strings.Join(cs, ",") + ")"
}

func choice(c Choice) string {
	if c.Chosen {
		return "yes"
	}
	return "no, " + model.Line(c.Why)
}
