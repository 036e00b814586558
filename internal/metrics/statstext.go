package metrics

import (
	"bufio"
	"compress/gzip"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// The per-Service series in the text exposition format (version 0.0.4),
// written from the published groups with no metric object or message per
// series; the rest of /metrics is the registry's, encoded by expfmt.

// statsFamily is one family of the groups' series as writeText writes
// it: a family with a direction is written for in, then out, under one
// header.
type statsFamily struct {
	name, typ string
	direction string // the direction label's value, or none
	value     func(g *statsGroup) uint64
}

// statsFamilies are the groups' families, in the order written.
var statsFamilies = []statsFamily{
	{nameConnections, "counter", "", func(g *statsGroup) uint64 { return g.Connections }},
	{namePackets, "counter", "in", func(g *statsGroup) uint64 { return g.InPackets }},
	{namePackets, "counter", "out", func(g *statsGroup) uint64 { return g.OutPackets }},
	{nameBytes, "counter", "in", func(g *statsGroup) uint64 { return g.InBytes }},
	{nameBytes, "counter", "out", func(g *statsGroup) uint64 { return g.OutBytes }},
	{nameActive, "gauge", "", func(g *statsGroup) uint64 { return g.Active }},
	{nameInactive, "gauge", "", func(g *statsGroup) uint64 { return g.Inactive }},
}

// labelEscaper escapes a label value as the text format requires.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// helpEscaper escapes a HELP line's text.
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// writeText writes v's series to w, each family under its HELP and TYPE
// lines, labels in name order as expfmt writes them. A nil v writes
// nothing.
func (s *ServiceStats) writeText(w *bufio.Writer, v *statsView) {
	if v == nil || len(v.groups) == 0 {
		return
	}
	var buf []byte
	header := func(name, help, typ string) {
		w.WriteString("# HELP " + name + " " + helpEscaper.Replace(help) + "\n# TYPE " + name + " " + typ + "\n")
	}
	sample := func(name, direction string, g *statsGroup, realServer string, value uint64) {
		buf = append(buf[:0], name...)
		buf = append(buf, '{')
		if direction != "" {
			buf = append(buf, `direction="`...)
			buf = append(buf, direction...)
			buf = append(buf, `",`...)
		}
		buf = appendLabel(buf, "kind", g.kind.String())
		buf = appendLabel(buf, "namespace", g.Namespace)
		buf = appendLabel(buf, "port", g.Port)
		if realServer != "" {
			buf = appendLabel(buf, "real_server", realServer)
		}
		buf = appendLabel(buf, "service", g.Name)
		buf[len(buf)-1] = '}'
		buf = append(buf, ' ')
		buf = strconv.AppendUint(buf, value, 10)
		buf = append(buf, '\n')
		w.Write(buf)
	}
	for i, f := range statsFamilies {
		if i == 0 || statsFamilies[i-1].name != f.name {
			header(f.name, familyHelp[f.name], f.typ)
		}
		for j := range v.groups {
			sample(f.name, f.direction, &v.groups[j], "", f.value(&v.groups[j]))
		}
	}
	if !s.realServers {
		return
	}
	for _, f := range []struct {
		name  string
		value func(g *statsGroup, i int) uint64
	}{
		{nameRSActive, func(g *statsGroup, i int) uint64 { return g.realServers[i].Active }},
		{nameRSInactive, func(g *statsGroup, i int) uint64 { return g.realServers[i].Inactive }},
	} {
		header(f.name, familyHelp[f.name], "gauge")
		for j := range v.groups {
			g := &v.groups[j]
			for i, rs := range g.realServers {
				sample(f.name, "", g, netip.AddrPortFrom(rs.Address, rs.Port).String(), f.value(g, i))
			}
		}
	}
}

// appendLabel appends name="value", to buf.
func appendLabel(buf []byte, name, value string) []byte {
	buf = append(buf, name...)
	buf = append(buf, `="`...)
	buf = append(buf, labelEscaper.Replace(value)...)
	return append(buf, `",`...)
}

// statsHandler serves /metrics with the per-Service series: g's families
// in the text format, then s's. It always answers in the text format (a
// scraper asking for the protobuf one gets text, which every Prometheus
// reads), gzip-compressed when the scraper accepts it.
func statsHandler(g prometheus.Gatherer, s *ServiceStats) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fams, err := g.Gather()
		if err != nil {
			http.Error(w, "gather metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		format := expfmt.NewFormat(expfmt.TypeTextPlain)
		w.Header().Set("Content-Type", string(format))
		var out io.Writer = w
		if acceptsGzip(r) {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			defer gz.Close()
			out = gz
		}
		bw := bufio.NewWriterSize(out, 32<<10)
		enc := expfmt.NewEncoder(bw, format)
		for _, f := range fams {
			if err := enc.Encode(f); err != nil {
				return
			}
		}
		s.writeText(bw, s.view())
		bw.Flush()
	})
}

// acceptsGzip says whether r's Accept-Encoding names gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
}
