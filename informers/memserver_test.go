package informers

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// memLists are the protobuf encodings of every object of the three
// resources, one by one.
type memLists struct{ svcs, slices, nodes [][]byte }

func memEncode(tb testing.TB, services, endpoints int, sh memShape) memLists {
	var out memLists
	for i := 0; i < services; i++ {
		out.svcs = append(out.svcs, memMarshal(tb, memService(i, sh)))
		out.slices = append(out.slices, memMarshal(tb, memSlice(i, endpoints, sh)))
	}
	for n := 1; n <= sh.nodes; n++ {
		out.nodes = append(out.nodes, memMarshal(tb, memNodeObject(n, sh)))
	}
	return out
}

func memMarshal(tb testing.TB, o interface{ Marshal() ([]byte, error) }) []byte {
	b, err := o.Marshal()
	if err != nil {
		tb.Fatalf("encode: %v", err)
	}
	return b
}

// memRV is the resourceVersion of the memServer's one snapshot.
const memRV = "900000"

// memServer serves the lists to a fake clientset as the API server serves
// them, every object decoded afresh from protobuf (as the daemon's client
// decodes them): a list at resourceVersion "0" whole (the watch cache
// ignores the limit), any other in pages of its limit with a continue
// token; with watchList, a watch that asks for the initial events streams
// them one by one and ends them with the initial-events-end bookmark (the
// watch-list of kube-apiserver 1.34, client-go's WatchListClient).
type memServer struct {
	watchList bool

	mu    sync.Mutex
	lists memLists
	// pages counts the list requests.
	pages int
}

// watchListClient is a fake clientset that tells the reflector it serves
// watch-lists.
type watchListClient struct{ *fake.Clientset }

func (watchListClient) IsWatchListSemanticsUnSupported() bool { return false }

func (s *memServer) client() kubernetes.Interface {
	c := fake.NewClientset()
	c.PrependReactor("list", "*", s.list)
	c.PrependWatchReactor("*", s.watch)
	if s.watchList {
		return watchListClient{c}
	}
	return c
}

// drop forgets the encodings, as a client keeps nothing of a list once it
// has been decoded.
func (s *memServer) drop() {
	s.mu.Lock()
	s.lists = memLists{}
	s.mu.Unlock()
}

func (s *memServer) encoded(resource string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch resource {
	case "services":
		return s.lists.svcs
	case "endpointslices":
		return s.lists.slices
	case "nodes":
		return s.lists.nodes
	}
	return nil
}

func (s *memServer) list(a k8stesting.Action) (bool, kruntime.Object, error) {
	la, ok := a.(k8stesting.ListActionImpl)
	if !ok {
		return false, nil, nil
	}
	s.mu.Lock()
	s.pages++
	s.mu.Unlock()
	opts := la.ListOptions
	enc := s.encoded(a.GetResource().Resource)
	from, to := 0, len(enc)
	if opts.Continue != "" {
		var err error
		if from, err = strconv.Atoi(opts.Continue); err != nil || from > len(enc) {
			return true, nil, fmt.Errorf("continue %q", opts.Continue)
		}
	}
	meta := metav1.ListMeta{ResourceVersion: memRV}
	if opts.Limit > 0 && opts.ResourceVersion != "0" && int64(len(enc)-from) > opts.Limit {
		to = from + int(opts.Limit)
		meta.Continue = strconv.Itoa(to)
	}
	enc = enc[from:to]
	var out kruntime.Object
	var err error
	switch a.GetResource().Resource {
	case "services":
		l := &corev1.ServiceList{ListMeta: meta}
		l.Items, err = memDecode[corev1.Service](enc)
		out = l
	case "endpointslices":
		l := &discoveryv1.EndpointSliceList{ListMeta: meta}
		l.Items, err = memDecode[discoveryv1.EndpointSlice](enc)
		out = l
	case "nodes":
		l := &corev1.NodeList{ListMeta: meta}
		l.Items, err = memDecode[corev1.Node](enc)
		out = l
	default:
		return false, nil, nil
	}
	return true, out, err
}

func memDecode[T any, PT interface {
	*T
	Unmarshal([]byte) error
}](enc [][]byte) ([]T, error) {
	out := make([]T, len(enc))
	for i, b := range enc {
		if err := PT(&out[i]).Unmarshal(b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// memObject decodes one object of resource.
func memObject(resource string, b []byte) (kruntime.Object, error) {
	switch resource {
	case "services":
		o := &corev1.Service{}
		return o, o.Unmarshal(b)
	case "endpointslices":
		o := &discoveryv1.EndpointSlice{}
		return o, o.Unmarshal(b)
	case "nodes":
		o := &corev1.Node{}
		return o, o.Unmarshal(b)
	}
	return nil, fmt.Errorf("resource %q", resource)
}

func (s *memServer) watch(a k8stesting.Action) (bool, watch.Interface, error) {
	wa, ok := a.(k8stesting.WatchActionImpl)
	if !ok {
		return false, nil, nil
	}
	resource := a.GetResource().Resource
	w := &memWatch{ch: make(chan watch.Event), done: make(chan struct{})}
	if s.watchList && wa.ListOptions.SendInitialEvents != nil && *wa.ListOptions.SendInitialEvents {
		go w.stream(resource, s.encoded(resource))
	}
	return true, w, nil
}

// memWatch is a watch that streams what it is given and then stays open
// until stopped.
type memWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func (w *memWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }
func (w *memWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *memWatch) send(e watch.Event) bool {
	select {
	case w.ch <- e:
		return true
	case <-w.done:
		return false
	}
}

// stream sends every object as Added, then the bookmark that ends the
// initial events.
func (w *memWatch) stream(resource string, enc [][]byte) {
	for _, b := range enc {
		o, err := memObject(resource, b)
		if err != nil {
			w.send(watch.Event{Type: watch.Error, Object: &metav1.Status{Message: err.Error()}})
			return
		}
		if !w.send(watch.Event{Type: watch.Added, Object: o}) {
			return
		}
	}
	bm, _ := memObject(resource, nil)
	m := bm.(metav1.Object)
	m.SetResourceVersion(memRV)
	m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	w.send(watch.Event{Type: watch.Bookmark, Object: bm})
}
