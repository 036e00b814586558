package events

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// restart is one process of the proxy: a reporter persisting in dir.
func restart(t *testing.T, dir string, uid string) (*Refusals, *[]sent) {
	t.Helper()
	got, sink := collect()
	e := New(sink, func(kind, ns, name string) string { return uid }, DefaultOptions)
	if err := e.Persist(dir, func(msg string, err error) { t.Errorf("%s: %v", msg, err) }); err != nil {
		t.Fatal(err)
	}
	return e, got
}

// TestPersistAcrossRestart: the demo's restart wrote every refusal's
// Event a second time (issue 15 item 11). A new process in the same state
// directory writes none for the refusals the last one reported, and one
// for a refusal that is new, changed, or on a re-created object.
func TestPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	loop := model.Refusal{Subject: nodeIP.Subject, Field: "spec.externalIPs", Address: "127.0.0.1", Reason: model.ReasonLoopback, Message: "never a VIP; skipped"}

	first, got := restart(t, dir, "uid-1")
	if n, _ := first.Report([]model.Refusal{nodeIP, loop}); n != 2 || len(*got) != 2 {
		t.Fatalf("first process emitted %d, want 2", n)
	}

	second, got := restart(t, dir, "uid-1")
	if n, _ := second.Report([]model.Refusal{nodeIP, loop}); n != 0 {
		t.Errorf("after a restart the same refusals emitted %d Events, want 0: %v", n, *got)
	}
	// Within the process, deduplication is as before: gone and back is new.
	if n, _ := second.Report([]model.Refusal{nodeIP}); n != 0 {
		t.Errorf("a subset emitted %d", n)
	}
	if n, _ := second.Report([]model.Refusal{nodeIP, loop}); n != 1 {
		t.Errorf("a returning refusal emitted %d, want 1", n)
	}

	changed := nodeIP
	changed.Message = "something else"
	third, _ := restart(t, dir, "uid-1")
	if n, _ := third.Report([]model.Refusal{changed, loop}); n != 1 {
		t.Errorf("after a restart, one changed refusal emitted %d, want 1", n)
	}

	// The Service deleted and created again under its name while no proxy
	// ran: its refusals are its own.
	fourth, _ := restart(t, dir, "uid-2")
	if n, _ := fourth.Report([]model.Refusal{changed, loop}); n != 2 {
		t.Errorf("a re-created Service's refusals emitted %d, want 2", n)
	}
}

// TestPersistExpires: an entry older than ReportedTTL (its Event expired in
// the API server) is reported again; a damaged file is an error and
// nothing is suppressed.
func TestPersistExpires(t *testing.T) {
	dir := t.TempDir()
	old := []reportedEntry{{Kind: "Service", Namespace: nodeIP.Subject.Namespace, Name: nodeIP.Subject.Name, UID: "u", ID: refusalID(nodeIP), At: time.Now().Add(-ReportedTTL - time.Minute)}}
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ReportedFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	e, _ := restart(t, dir, "u")
	if n, _ := e.Report([]model.Refusal{nodeIP}); n != 1 {
		t.Errorf("an expired entry suppressed the Event: emitted %d, want 1", n)
	}

	if err := os.WriteFile(filepath.Join(dir, ReportedFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, sink := collect()
	e = New(sink, nil, DefaultOptions)
	if err := e.Persist(dir, nil); err == nil {
		t.Error("a damaged file loaded without error")
	}
	if n, _ := e.Report([]model.Refusal{nodeIP}); n != 1 || len(*got) != 1 {
		t.Errorf("after a damaged file, emitted %d, want 1", n)
	}
}
