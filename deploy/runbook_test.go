package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/test/mdanchor"
)

// runbookURL is where every alert's runbook_url points: a section of
// docs/runbook.md as the repository's web view shows it.
const runbookURL = "https://github.com/ipvs-proxy/ipvs-proxy/blob/main/docs/runbook.md#"

// TestAlertRunbooks: every alert of the monitoring component carries a
// runbook_url into a section of docs/runbook.md that exists.
func TestAlertRunbooks(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("components", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatal(err)
	}
	anchors, err := mdanchor.File(filepath.Join("..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbookURL)
			if !ok || !slices.Contains(anchors, anchor) {
				t.Errorf("alert %s: runbook_url %q, want %sANCHOR of a heading of docs/runbook.md", r.Alert, url, runbookURL)
			}
		}
	}
	if alerts == 0 {
		t.Error("no alert in prometheusrule.yaml")
	}
}
