package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// ReportedFile is the file in the state directory (--state-dir) that holds
// the refusals a proxy reported as Events, so that its next process does
// not report them again: one refusal, one Event, across restarts too.
const ReportedFile = "reported-events.json"

// ReportedTTL is how long a refusal reported by an earlier process counts
// as reported: a little less than kube-apiserver's default --event-ttl
// (1h), after which its Event is gone and reporting it again is right.
const ReportedTTL = 55 * time.Minute

// reportedEntry is one refusal reported as an Event, as ReportedFile holds it.
type reportedEntry struct {
	// Kind is "Service" or "Node"; Namespace (a Service's) and Name name it.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// UID is the object's UID when the Event was written: a Service
	// deleted and created again under its name gets its own Event.
	UID string `json:"uid,omitempty"`
	// ID is the refusal: reason, field, address and message.
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// subject is the object the entry concerns.
func (en reportedEntry) subject() model.Subject {
	if en.Kind == "Node" {
		return model.NodeSubject(en.Name)
	}
	return model.ServiceSubject(types.NamespacedName{Namespace: en.Namespace, Name: en.Name})
}

// reportedKey is one refusal of one object.
type reportedKey struct {
	subject model.Subject
	id      string
}

// Persist makes e remember the refusals it reports in dir/ReportedFile and
// loads those an earlier process reported there within ReportedTTL: the
// first Report after a restart writes no Event for a refusal whose Event
// that process wrote. warn receives the errors of later writes (e keeps
// reporting; a restart may then repeat Events). A missing file is no error.
func (e *Refusals) Persist(dir string, warn func(msg string, err error)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stateFile, e.warn = filepath.Join(dir, ReportedFile), warn
	e.prior, e.times = map[reportedKey]reportedEntry{}, map[reportedKey]time.Time{}
	b, err := os.ReadFile(e.stateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read reported refusals: %w", err)
	}
	var entries []reportedEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return fmt.Errorf("read reported refusals %s: %w", e.stateFile, err)
	}
	for _, en := range entries {
		if time.Since(en.At) < ReportedTTL {
			e.prior[reportedKey{en.subject(), en.ID}] = en
		}
	}
	return nil
}

// fromPrior reports whether an earlier process reported refusal id of obj
// (the same object) less than ReportedTTL ago, so that its Event is still
// in the API server; each is taken once. Call with e.mu held.
func (e *Refusals) fromPrior(obj model.Subject, id string) bool {
	key := reportedKey{obj, id}
	p, ok := e.prior[key]
	if !ok {
		return false
	}
	delete(e.prior, key)
	if time.Since(p.At) >= ReportedTTL {
		return false // its Event has expired by now
	}
	if uid := e.lookup(kindOf(obj), obj.Namespace, obj.Name); p.UID != "" && uid != "" && uid != p.UID {
		return false
	}
	e.times[key] = p.At
	return true
}

// stamp records when refusal id of obj was reported. Call with e.mu held.
func (e *Refusals) stamp(obj model.Subject, id string) {
	if e.times != nil {
		e.times[reportedKey{obj, id}] = time.Now()
	}
	e.dirty = true
}

// save writes the reported refusals to the state file when they changed
// since the last write, replacing it atomically. Call with e.mu held.
func (e *Refusals) save() {
	if e.stateFile == "" || !e.dirty {
		return
	}
	e.dirty = false
	var entries []reportedEntry
	times := map[reportedKey]time.Time{}
	for obj, done := range e.reported {
		kind := kindOf(obj)
		uid := e.lookup(kind, obj.Namespace, obj.Name)
		for id := range done {
			key := reportedKey{obj, id}
			at, ok := e.times[key]
			if !ok {
				at = time.Now()
			}
			times[key] = at
			entries = append(entries, reportedEntry{Kind: kind, Namespace: obj.Namespace, Name: obj.Name, UID: uid, ID: id, At: at})
		}
	}
	e.times = times
	slices.SortFunc(entries, func(a, b reportedEntry) int {
		if c := a.subject().Compare(b.subject()); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if err := writeAtomic(e.stateFile, entries); err != nil && e.warn != nil {
		e.warn("reported refusals not written: a restart may write their Events again", err)
	}
}

func writeAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
