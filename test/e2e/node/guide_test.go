//go:build !kernel

package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
)

const sample = "# Guide\n\n" +
	"## Tested\n\nText.\n\n" +
	"<!-- test: one -->\n```sh\nkubectl apply -k x   # a comment\necho \"$NODE\"\n```\n\n" +
	"<!-- not tested: on the node -->\n```sh\nipvsadm -S -n | diff a - ; kubectl get pods\n```\n\n" +
	"```sh\nipvsadm -Ln   # kubectl in a comment only\n```\n\n" +
	"```yaml\n# kubectl apply\nkind: X\n```\n\n" +
	"### Below\n\n<!-- test: two/b -->\n```sh\nx=$(kubectl get node -o name)\n```\n\n" +
	"## Not tested\n\n```sh\nkubectl delete node x\n```\n"

func TestParseGuide(t *testing.T) {
	blocks, err := node.ParseGuide(sample)
	if err != nil {
		t.Fatal(err)
	}
	want := []node.Block{
		{Name: "one", Section: "Tested", Line: 9, Script: "kubectl apply -k x   # a comment\necho \"$NODE\"\n"},
		{Name: "two/b", Section: "Below", Line: 31, Script: "x=$(kubectl get node -o name)\n"},
	}
	if !slices.Equal(blocks, want) {
		t.Errorf("blocks:\n%+v\nwant\n%+v", blocks, want)
	}
	for _, tc := range []struct{ name, edit, with, err string }{
		{"marker without a fence", "<!-- test: one -->\n```sh", "<!-- test: one -->\n\n```sh", "line 7: marker"},
		{"marked twice", "<!-- test: two/b -->", "<!-- test: one -->", `block "one" is marked twice`},
		{"unmarked kubectl in a tested section", "<!-- not tested: on the node -->\n", "", `line 13: a kubectl block in "Tested"`},
		{"unmarked kubectl after a pipe", "### Below\n\n", "### Below\n\n```sh\nfoo | kubectl apply -f -\n```\n", `a kubectl block in "Below"`},
		{"unclosed fence", "kubectl delete node x\n```\n", "kubectl delete node x\n", "the fence is not closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(sample, tc.edit, tc.with, 1)
			if text == sample {
				t.Fatalf("%q is not in the sample", tc.edit)
			}
			_, err := node.ParseGuide(text)
			if !errors.Is(err, node.ErrGuide) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}

// migrationGuide is docs/migration.md.
func migrationGuide(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestMigrationGuideBlocks: docs/migration.md has every block make
// test-migration-doc runs, in the guide's order, and no other; removing a
// marker, or adding a kubectl command the test does not run to a tested
// step, fails.
func TestMigrationGuideBlocks(t *testing.T) {
	text := migrationGuide(t)
	blocks, err := node.ParseGuide(text)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range blocks {
		names = append(names, b.Name)
	}
	wantOrder := []string{"replace", "before", "node-by-node/affinity", "node-by-node/install", "node-by-node/move",
		"node-by-node/finish", "rollback/one-node", "rollback/kube-proxy-back", "rollback/finish"}
	if !slices.Equal(names, wantOrder) {
		t.Errorf("marked blocks in docs/migration.md: %q, want %q", names, wantOrder)
	}
	script, err := node.GuideScript(blocks, node.MigrationGuide)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range script {
		t.Logf("%s (line %d, %s): %d lines", b.Name, b.Line, b.Section, strings.Count(b.Script, "\n"))
	}

	// The block gone: no step finds it. Its marker gone: its section has
	// other tested blocks, so it is an unmarked kubectl block there.
	marker := "<!-- test: rollback/finish -->\n"
	block := marker + "```sh\nkubectl delete -k deploy/overlays/migrate-node-by-node"
	if !strings.Contains(text, block) {
		t.Fatalf("docs/migration.md has no block %q", block)
	}
	blocks, err = node.ParseGuide(strings.Replace(text, block, "```yaml\n", 1))
	if err != nil {
		t.Fatalf("without the block rollback/finish: %v", err)
	}
	if _, err := node.GuideScript(blocks, node.MigrationGuide); err == nil || !strings.Contains(err.Error(), "no block marked <!-- test: rollback/finish -->") {
		t.Errorf("without the block rollback/finish: %v, want an error", err)
	}
	if _, err := node.ParseGuide(strings.Replace(text, marker, "", 1)); err == nil || !strings.Contains(err.Error(), "has no marker") {
		t.Errorf("without the marker of rollback/finish: %v, want an error", err)
	}
	added := strings.Replace(text, "### 4. Install ipvs-proxy for labelled nodes only\n",
		"### 4. Install ipvs-proxy for labelled nodes only\n\n```sh\nkubectl -n kube-system delete configmap kube-proxy\n```\n", 1)
	if added == text {
		t.Fatal(`no heading "### 4. Install ipvs-proxy for labelled nodes only" in docs/migration.md`)
	}
	if _, err := node.ParseGuide(added); err == nil || !strings.Contains(err.Error(), "has no marker") {
		t.Errorf("an unmarked kubectl block in step 4: %v, want an error", err)
	}
}
