// Package events turns the planner's refusals into Warning Events on the
// Service (or Node) they concern: reason code as the Event reason, and a
// note naming the field, the address and what was done instead. Events are
// deduplicated — one refusal gives one Event until it changes or goes away
// and comes back — and rate-limited. Source: component ipvs-proxy, host
// this node. Refusals that every node makes alike (model.ScopeCluster) are
// reported by one proxy per cluster, elected through a coordination.k8s.io
// Lease (elect.go); each node reports its own node-specific ones. It
// writes Events and that one Lease; it never reads or changes Services.
package events

import (
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Component is the Event source component.
const Component = "ipvs-proxy"

// Lookup returns the UID of the Service (kind "Service") or Node (kind
// "Node") so that the Event is attached to it; "" when it is unknown.
type Lookup func(kind, namespace, name string) string

// Refusals reports refusals as Events.
type Refusals struct {
	sink    func(ref *corev1.ObjectReference, reason, note string)
	lookup  Lookup
	limiter flowcontrol.RateLimiter

	// elected: cluster-scoped refusals are reported only while leading.
	elected bool

	mu sync.Mutex
	// reported maps an object to the refusals already reported for it.
	reported map[model.Subject]map[string]bool
	// leading is whether this reporter reports cluster-scoped refusals
	// (always, unless elected).
	leading bool
	// last are the refusals of the last Report, reported again when this
	// reporter starts leading.
	last []model.Refusal

	// Persistence across restarts (persist.go): the state file, what an
	// earlier process reported, when each refusal was reported, and
	// whether reported changed since the last write.
	stateFile string
	warn      func(string, error)
	prior     map[reportedKey]reportedEntry
	times     map[reportedKey]time.Time
	dirty     bool
}

// Options tune the rate limit: QPS Events per second with Burst.
type Options struct {
	QPS   float32
	Burst int
	// Elected makes the reporter report cluster-scoped refusals
	// (model.ScopeCluster) only while SetLeading(true) holds: one reporter
	// per cluster writes them (Elect). Without it, every refusal is
	// reported.
	Elected bool
}

// DefaultOptions allow bursts of 100 Events, then 5 a second.
var DefaultOptions = Options{QPS: 5, Burst: 100}

// New returns a reporter writing through sink. sink receives every Event
// that passes deduplication and the rate limit.
func New(sink func(ref *corev1.ObjectReference, reason, note string), lookup Lookup, o Options) *Refusals {
	if lookup == nil {
		lookup = func(string, string, string) string { return "" }
	}
	return &Refusals{
		sink:     sink,
		lookup:   lookup,
		limiter:  flowcontrol.NewTokenBucketRateLimiter(o.QPS, o.Burst),
		elected:  o.Elected,
		leading:  !o.Elected,
		reported: map[model.Subject]map[string]bool{},
	}
}

// SetLeading tells an elected reporter whether it is the cluster's
// reporter of cluster-scoped refusals. Starting to lead reports the last
// refusals' cluster-scoped ones at once; stopping forgets them, so that
// leading again reports them again (the Events of a reporter that died
// are not known here: at a failover each refusal may be reported twice).
func (e *Refusals) SetLeading(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.elected || e.leading == on {
		return
	}
	e.leading = on
	if on {
		e.report(e.last)
		return
	}
	for _, done := range e.reported {
		for id := range done {
			if reasonOfID(id).Scope() == model.ScopeCluster {
				delete(done, id)
				e.dirty = true
			}
		}
	}
	e.save()
}

// Leading reports whether this reporter reports cluster-scoped refusals.
func (e *Refusals) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// NewBroadcaster starts an EventBroadcaster that writes core/v1 Events
// through client with source {component: ipvs-proxy, host: nodeName}, and
// returns the sink for New and a function that stops the broadcaster.
func NewBroadcaster(client kubernetes.Interface, nodeName string) (func(ref *corev1.ObjectReference, reason, note string), func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: nodeName})
	return func(ref *corev1.ObjectReference, reason, note string) {
		rec.Event(ref, corev1.EventTypeWarning, reason, note)
	}, b.Shutdown
}

func refusalID(r model.Refusal) string {
	return string(r.Reason) + "\x00" + r.Field + "\x00" + r.Address + "\x00" + r.Message
}

// reasonOfID is the reason a refusalID starts with.
func reasonOfID(id string) model.Reason {
	reason, _, _ := strings.Cut(id, "\x00")
	return model.Reason(reason)
}

// kindOf is the API kind of a refusal's subject.
func kindOf(s model.Subject) string {
	if s.Kind == model.SubjectNode {
		return "Node"
	}
	return "Service"
}

// Note renders the Event message of a refusal, one line: "FIELD ADDRESS
// refused (REASON): MESSAGE", the field and the address as model.Word (an
// empty or odd value Go-quoted), the message as model.Line.
func Note(r model.Refusal) string {
	return model.Word(r.Field) + " " + model.Word(r.Address) + " refused (" + model.Word(string(r.Reason)) + "): " + model.Line(r.Message)
}

// Report takes every current refusal (of all services) and emits an
// Event for each one not reported before. Refusals that went away are
// forgotten, so they are reported again if they come back. An elected
// reporter that is not leading skips the cluster-scoped ones. It returns
// how many Events were emitted and how many were held back by the rate
// limit (those are tried again at the next Report).
func (e *Refusals) Report(rs []model.Refusal) (emitted, limited int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.elected {
		e.last = slices.Clone(rs)
	}
	emitted, limited = e.report(rs)
	e.save()
	return emitted, limited
}

func (e *Refusals) report(rs []model.Refusal) (emitted, limited int) {
	current := map[model.Subject]map[string]model.Refusal{}
	for _, r := range rs {
		if r.Subject.IsZero() || !e.leading && r.Reason.Scope() == model.ScopeCluster {
			continue
		}
		m := current[r.Subject]
		if m == nil {
			m = map[string]model.Refusal{}
			current[r.Subject] = m
		}
		m[refusalID(r)] = r
	}
	for obj := range e.reported {
		if _, ok := current[obj]; !ok {
			delete(e.reported, obj)
			e.dirty = true
		}
	}
	for obj, m := range current {
		done := e.reported[obj]
		for id := range done {
			if _, ok := m[id]; !ok {
				delete(done, id)
				e.dirty = true
			}
		}
		for id, r := range m {
			if done[id] {
				continue
			}
			prior := e.fromPrior(obj, id)
			if !prior && !e.limiter.TryAccept() {
				limited++
				continue
			}
			if !prior {
				kind := kindOf(obj)
				ref := &corev1.ObjectReference{Kind: kind, APIVersion: "v1", Namespace: obj.Namespace, Name: obj.Name,
					UID: types.UID(e.lookup(kind, obj.Namespace, obj.Name))}
				e.sink(ref, string(r.Reason), Note(r))
				emitted++
				e.stamp(obj, id)
			}
			e.dirty = true
			if done == nil {
				done = map[string]bool{}
				e.reported[obj] = done
			}
			done[id] = true
		}
	}
	return emitted, limited
}
