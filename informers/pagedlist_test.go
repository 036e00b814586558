package informers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// pagedServer answers list requests of Services in pages from snapshots:
// snapshot i holds services[i] objects at resourceVersion 100+i. A request
// without a continue token reads the newest snapshot; expire makes the
// next continued request fail with 410 Gone and the snapshot move on.
type pagedServer struct {
	mu       sync.Mutex
	services []int // objects per snapshot
	snap     int
	expire   int // continued requests to fail, from now
	requests []metav1.ListOptions
	// transformed counts the objects the transform saw before each request.
	transformed []int
	seen        int
}

func (s *pagedServer) list(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, opts)
	s.transformed = append(s.transformed, s.seen)
	snap := s.snap
	from := 0
	if opts.Continue != "" {
		var err error
		if _, err = fmt.Sscanf(opts.Continue, "%d/%d", &snap, &from); err != nil {
			return nil, apierrors.NewBadRequest("continue " + opts.Continue)
		}
		if s.expire > 0 {
			s.expire--
			s.snap++
			return nil, apierrors.NewResourceExpired("The provided continue parameter is too old")
		}
	}
	n := s.services[snap]
	to := n
	out := &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(100 + snap)}}
	if opts.Limit > 0 && int64(n-from) > opts.Limit {
		to = from + int(opts.Limit)
		out.Continue = fmt.Sprintf("%d/%d", snap, to)
	}
	for i := from; i < to; i++ {
		svc := testService(fmt.Sprintf("s%d-%03d", snap, i))
		svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		out.Items = append(out.Items, *svc)
	}
	return out, nil
}

func (s *pagedServer) transform(obj any) (any, error) {
	s.mu.Lock()
	s.seen++
	s.mu.Unlock()
	return StripUnused(obj)
}

// listed checks what PagedList.List returned: want Services, each a lean
// copy, named after snapshot snap, at its resourceVersion.
func listed(t *testing.T, obj runtime.Object, snap, want int) {
	t.Helper()
	l, ok := obj.(*metav1.List)
	if !ok {
		t.Fatalf("List returned %T", obj)
	}
	if got := l.ResourceVersion; got != strconv.Itoa(100+snap) {
		t.Errorf("resourceVersion %q, want the snapshot's %d", got, 100+snap)
	}
	if len(l.Items) != want {
		t.Fatalf("%d items, want %d", len(l.Items), want)
	}
	for i, it := range l.Items {
		svc, ok := it.Object.(*cachedService)
		if !ok {
			t.Fatalf("item %d is %T, not a cachedService", i, it.Object)
		}
		if name := fmt.Sprintf("s%d-%03d", snap, i); svc.name != name {
			t.Errorf("item %d is %s, want %s", i, svc.name, name)
		}
	}
}

// TestPagedList: the list goes page by page through one snapshot, every
// page transformed before the next is asked for, and returns the
// snapshot's resourceVersion; the reflector's resourceVersion "0" (which
// the watch cache would answer whole) becomes a consistent read.
func TestPagedList(t *testing.T) {
	srv := &pagedServer{services: []int{25}}
	p := &PagedList{ListPage: srv.list, Transform: srv.transform, PageSize: 10}
	obj, err := p.List(metav1.ListOptions{ResourceVersion: "0", Limit: 500, LabelSelector: "a=b"})
	if err != nil {
		t.Fatal(err)
	}
	listed(t, obj, 0, 25)
	if len(srv.requests) != 3 {
		t.Fatalf("%d requests, want 3 pages: %+v", len(srv.requests), srv.requests)
	}
	for i, r := range srv.requests {
		wantCont := ""
		if i > 0 {
			wantCont = fmt.Sprintf("0/%d", 10*i)
		}
		if r.ResourceVersion != "" || r.ResourceVersionMatch != "" || r.Limit != 10 || r.Continue != wantCont || r.LabelSelector != "a=b" {
			t.Errorf("request %d: %+v, want resourceVersion \"\", limit 10, continue %q, the selector", i, r, wantCont)
		}
		if srv.transformed[i] != 10*i {
			t.Errorf("request %d asked after %d objects were transformed, want %d: a page is transformed before the next one is read", i, srv.transformed[i], 10*i)
		}
	}
}

// TestPagedListExpired: when the snapshot expires between two pages (410
// Gone), the list starts again at the first page of the newest state and
// returns that snapshot alone; past maxListRestarts it gives up with
// ErrListRestarts and the API server's error.
func TestPagedListExpired(t *testing.T) {
	srv := &pagedServer{services: []int{25, 12, 7}, expire: 1}
	p := &PagedList{ListPage: srv.list, Transform: srv.transform, PageSize: 10}
	obj, err := p.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	listed(t, obj, 1, 12)
	var conts []string
	for _, r := range srv.requests {
		conts = append(conts, r.Continue)
	}
	if want := []string{"", "0/10", "", "1/10"}; fmt.Sprint(conts) != fmt.Sprint(want) {
		t.Errorf("continue tokens %q, want %q", conts, want)
	}

	srv = &pagedServer{services: []int{25, 25, 25, 25, 25}, expire: maxListRestarts + 1}
	p = &PagedList{ListPage: srv.list, PageSize: 10}
	_, err = p.List(metav1.ListOptions{})
	if !errors.Is(err, ErrListRestarts) || !apierrors.IsResourceExpired(err) {
		t.Errorf("err = %v, want ErrListRestarts and 410 Expired", err)
	}
	if len(srv.requests) != 2*(maxListRestarts+1) {
		t.Errorf("%d requests, want %d", len(srv.requests), 2*(maxListRestarts+1))
	}
	// Any other error ends the list at once.
	p.ListPage = func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no"))
	}
	if _, err := p.List(metav1.ListOptions{}); !apierrors.IsForbidden(err) || errors.Is(err, ErrListRestarts) {
		t.Errorf("err = %v, want Forbidden", err)
	}
}

// TestWatcherPagedRelist: the Watcher's informers list through PagedList
// (pages of DefaultPageSize at resourceVersion ""), the transform applies
// to watch events, and the relist after a watch expired takes the same
// paged path.
func TestWatcherPagedRelist(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	var mu sync.Mutex
	var svcLists []metav1.ListOptions
	var svcWatches []*watch.RaceFreeFakeWatcher
	n := DefaultPageSize + 1
	client.PrependReactor("list", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		mu.Lock()
		defer mu.Unlock()
		svcLists = append(svcLists, opts)
		out := &corev1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(10 + len(svcLists))}}
		from, to := 0, n
		if opts.Continue != "" {
			from, _ = strconv.Atoi(opts.Continue)
		}
		if opts.Limit > 0 && opts.ResourceVersion != "0" && int64(to-from) > opts.Limit {
			to = from + int(opts.Limit)
			out.Continue = strconv.Itoa(to)
		}
		for i := from; i < to; i++ {
			out.Items = append(out.Items, *testService(fmt.Sprintf("s%04d", i)))
		}
		return true, out, nil
	})
	client.PrependWatchReactor("services", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		mu.Lock()
		svcWatches = append(svcWatches, w)
		mu.Unlock()
		return true, w, nil
	})
	w, err := NewWatcher(client, "n1", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("no cache sync")
	}
	if got := len(w.ServiceNames()); got != n {
		t.Fatalf("%d Services cached, want %d", got, n)
	}
	checkPages := func(from int) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(svcLists) != from+2 {
			t.Fatalf("%d list requests, want %d: %+v", len(svcLists), from+2, svcLists)
		}
		for i, r := range svcLists[from:] {
			if r.ResourceVersion != "" || r.Limit != DefaultPageSize || (i == 1) != (r.Continue != "") || r.LabelSelector != ProxySelector().String() {
				t.Errorf("list request %d: %+v, want page %d of %d at resourceVersion \"\" with the proxy's selector", from+i, r, i+1, DefaultPageSize)
			}
		}
	}
	checkPages(0)

	// A watch event goes through the transform too.
	mu.Lock()
	first := svcWatches[0]
	mu.Unlock()
	added := testService("added")
	added.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	first.Add(added)
	waitFor(t, "the added Service", func() bool { return w.ServiceObject("default", "added") != nil })
	if got, _, _ := w.svcInf.GetStore().GetByKey("default/added"); reflect.TypeOf(got) != reflect.TypeFor[*cachedService]() {
		t.Errorf("the watched Service is cached as %T, not as a cachedService", got)
	}

	// The watch expires: the reflector lists again, in pages.
	first.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	waitFor(t, "the relist", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(svcLists) >= 4
	})
	checkPages(2)
	waitFor(t, "the relisted cache", func() bool { return w.ServiceObject("default", "added") == nil })
	for _, o := range w.svcInf.GetStore().List() {
		if _, ok := o.(*cachedService); !ok {
			t.Fatalf("%T cached after the relist, not a cachedService", o)
		}
	}
}
