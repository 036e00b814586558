package mdanchor

import (
	"slices"
	"testing"
)

func TestAnchors(t *testing.T) {
	page := "# Runbook: a node's address\n" +
		"## 1. The failure\n" +
		"```sh\n# Is node B's address bound?\n```\n" +
		"### IPVSProxySyncStale\n" +
		"#!/bin/sh\n#tag\n" +
		"## Notes\n## Notes\n"
	want := []string{"runbook-a-nodes-address", "1-the-failure", "ipvsproxysyncstale", "notes", "notes-1"}
	if got := Anchors(page); !slices.Equal(got, want) {
		t.Errorf("Anchors: %q, want %q", got, want)
	}
}
