package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/recovery"
)

// TestRecoverJSONCarriesEveryReportField: the JSON shape is the report's,
// not a copy that drifts from it (it once lost Untrusted).
func TestRecoverJSONCarriesEveryReportField(t *testing.T) {
	rep := &recovery.Report{APIServer: "reachable", NodeCache: "2 nodes", Applied: true, Warnings: []string{"w"},
		OtherProxies: []recovery.Process{}, Untrusted: "its Nodes do not include this node"}
	var b bytes.Buffer
	if err := writeRecoverJSON(&b, rep, 3); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{"apiServer": rep.APIServer, "nodeCache": rep.NodeCache, "applied": true,
		"untrusted": rep.Untrusted, "exitCode": 3.0} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v in\n%s", key, got[key], want, b.String())
		}
	}
}
