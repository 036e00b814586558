package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

// pagedSlice is an EndpointSlice of one ready endpoint.
func pagedSlice(name string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// sliceNames are s000, s001… (n of them).
func sliceNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s%03d", i)
	}
	return out
}

// createSlices creates a pagedSlice of each name.
func createSlices(ctx context.Context, t *testing.T, eps discoveryclient.EndpointSliceInterface, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := eps.Create(ctx, pagedSlice(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// pagedRecorder lists EndpointSlices page by page for informers.PagedList,
// recording every request and the resourceVersion of every page; before
// page n it calls between[n], if any.
type pagedRecorder struct {
	client   discoveryclient.EndpointSliceInterface
	between  map[int]func()
	requests []metav1.ListOptions
	rvs      []string
	errs     []error
}

func (r *pagedRecorder) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	r.requests = append(r.requests, opts)
	if f := r.between[len(r.requests)]; f != nil {
		f()
	}
	l, err := r.client.List(ctx, opts)
	r.errs = append(r.errs, err)
	if err != nil {
		return nil, err
	}
	r.rvs = append(r.rvs, l.ResourceVersion)
	return l, nil
}

// names are the names of a PagedList result's items, each checked to be a
// lean copy (no managedFields: the API server sets them on every object).
func names(t *testing.T, obj runtime.Object) []string {
	t.Helper()
	l, ok := obj.(*metav1.List)
	if !ok {
		t.Fatalf("PagedList returned %T", obj)
	}
	var out []string
	for _, it := range l.Items {
		// The transform turns every EndpointSlice into the informers'
		// own cache entry: a decoded one was not transformed.
		m, ok := it.Object.(metav1.Object)
		if _, decoded := it.Object.(*discoveryv1.EndpointSlice); decoded || !ok {
			t.Fatalf("item %T: not transformed", it.Object)
		}
		out = append(out, m.GetName())
	}
	return out
}

// TestPagedList: informers.PagedList against the real API server. 120
// EndpointSlices in pages of 50: three requests at resourceVersion "" (not
// the reflector's "0", which the watch cache answers whole), continued by
// the server's tokens, every object transformed. A slice created and one
// deleted between the first and second page change nothing: the pages are
// one snapshot, whose resourceVersion the list returns, and a watch from
// it delivers both changes.
func TestPagedList(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	client := kubernetes.NewForConfigOrDie(srv.Config())
	ns := unique("paged")
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eps := client.DiscoveryV1().EndpointSlices(ns)
	want := sliceNames(120)
	createSlices(ctx, t, eps, want...)
	create := func(name string) { createSlices(ctx, t, eps, name) }

	rec := &pagedRecorder{client: eps, between: map[int]func(){2: func() {
		create("zz-added")
		if err := eps.Delete(ctx, "s119", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}}}
	transformed := 0
	p := &informers.PagedList{ListPage: rec.list, PageSize: 50, Transform: func(o any) (any, error) {
		transformed++
		return informers.StripUnused(o)
	}}
	obj, err := p.List(metav1.ListOptions{ResourceVersion: "0", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(t, obj); !slices.Equal(got, want) {
		t.Errorf("listed %d slices %v…, want the 120 of the first page's snapshot", len(got), got[max(0, len(got)-3):])
	}
	if transformed != 120 {
		t.Errorf("%d objects transformed, want 120", transformed)
	}
	if len(rec.requests) != 3 {
		t.Fatalf("%d requests, want 3 pages: %+v", len(rec.requests), rec.requests)
	}
	for i, r := range rec.requests {
		if r.ResourceVersion != "" || r.Limit != 50 || (i > 0) != (r.Continue != "") {
			t.Errorf("request %d: resourceVersion %q, limit %d, continue %q; want \"\", 50, a token after the first", i, r.ResourceVersion, r.Limit, r.Continue)
		}
	}
	rv := obj.(*metav1.List).ResourceVersion
	if rv == "" || rec.rvs[1] != rv || rec.rvs[2] != rv || rec.rvs[0] != rv {
		t.Errorf("list resourceVersion %q, pages at %q: want one snapshot", rv, rec.rvs)
	}
	// The reflector watches from the list's resourceVersion: it sees what
	// changed after the snapshot.
	w, err := eps.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for len(events) < 2 {
		select {
		case e := <-w.ResultChan():
			if m, err := metaName(e.Object); err == nil && (e.Type == watch.Added || e.Type == watch.Deleted) {
				events = append(events, string(e.Type)+" "+m)
			}
		case <-ctx.Done():
			t.Fatalf("watch from %s: %v", rv, events)
		}
	}
	w.Stop()
	if want := []string{"ADDED zz-added", "DELETED s119"}; !slices.Equal(events, want) {
		t.Errorf("watch from the list's resourceVersion: %v, want %v", events, want)
	}

}

// TestPagedListExpired: when etcd compacted the snapshot away between two
// pages, the continued request is 410 Gone and the list starts again from
// the first page at the newest state, which it returns alone. The server
// here keeps no snapshots in its watch cache (ListFromCacheSnapshot, on by
// default since 1.34, answers a continue token from the cache for as long
// as the cache keeps that snapshot, which a compaction by hand does not
// end): the continued pages are read from etcd, as on servers before 1.34.
func TestPagedListExpired(t *testing.T) {
	srv := apiserver.Start(t, apiserver.Options{ExtraFlags: []string{"--feature-gates=ListFromCacheSnapshot=false"}})
	ctx := ctxFor(t)
	client := kubernetes.NewForConfigOrDie(srv.Config())
	eps := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	want := sliceNames(30)
	createSlices(ctx, t, eps, want...)
	rec := &pagedRecorder{client: eps, between: map[int]func(){2: func() {
		createSlices(ctx, t, eps, "zz-late")
		if _, err := srv.CompactEtcd(ctx); err != nil {
			t.Fatal(err)
		}
	}}}
	p := &informers.PagedList{ListPage: rec.list, PageSize: 20, Transform: informers.StripUnused}
	obj, err := p.List(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, err := range rec.errs {
		codes = append(codes, fmt.Sprintf("%s: %v", apierrors.ReasonForError(err), err))
	}
	t.Logf("requests: %d; errors: %q", len(rec.requests), codes)
	if len(rec.errs) < 2 || !apierrors.IsResourceExpired(rec.errs[1]) {
		t.Fatalf("the second page after the compaction: %v, want 410 Expired", rec.errs)
	}
	if got, want := names(t, obj), append(want, "zz-late"); !slices.Equal(got, want) {
		t.Errorf("after the restart: %d slices, last %v; want %d, last %v", len(got), got[max(0, len(got)-2):], len(want), want[len(want)-2:])
	}
	if len(rec.requests) != 4 {
		t.Fatalf("%d requests, want 4 (page 1, 410, pages 1 and 2 again)", len(rec.requests))
	}
	if r := rec.requests[2]; r.Continue != "" || r.ResourceVersion != "" {
		t.Errorf("the request after 410: continue %q, resourceVersion %q; want a new list from the first page", r.Continue, r.ResourceVersion)
	}
	if rv := obj.(*metav1.List).ResourceVersion; rv == rec.rvs[0] || rv != rec.rvs[len(rec.rvs)-1] {
		t.Errorf("resourceVersion %s after the restart, pages at %v: want the new snapshot's", rv, rec.rvs)
	}
}

func metaName(o runtime.Object) (string, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return "", fmt.Errorf("%T", o)
	}
	return m.GetName(), nil
}

// watchListGates turn client-go's WatchListClient on, as client-go 0.35+
// has it by default (the main module's 0.37: the daemon); this module pins
// 0.34, where it is off.
type watchListGates struct{ clientfeatures.Gates }

func (g watchListGates) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.WatchListClient || g.Gates.Enabled(f)
}

// requestLog records the API requests of a client.
type requestLog struct {
	mu   sync.Mutex
	reqs []string
	rt   http.RoundTripper
}

func (l *requestLog) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	l.mu.Unlock()
	return l.rt.RoundTrip(r)
}

// TestWatcherWatchList: against this kube-apiserver (1.34, WatchList on by
// default) a Watcher whose client-go asks for watch-lists fills its caches
// from them and never lists: PagedList's list is the fallback for servers
// without watch-list. This is the daemon's path: its client-go (0.37) asks
// by default.
func TestWatcherWatchList(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx := ctxFor(t)
	old := clientfeatures.FeatureGates()
	clientfeatures.ReplaceFeatureGates(watchListGates{old})
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(old) })
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	createSlices(ctx, t, admin.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault), unique("wl"))
	log := &requestLog{}
	cfg := srv.Config()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.rt = rt; return log })
	w, err := informers.NewWatcher(kubernetes.NewForConfigOrDie(cfg), "n1", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	w.Start(runCtx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	if len(w.ServiceNames()) == 0 {
		t.Fatal("no Service cached")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	var streams int
	for _, r := range log.reqs {
		if strings.Contains(r, "sendInitialEvents=true") {
			streams++
		} else if !strings.Contains(r, "watch=") {
			t.Errorf("a list, not a watch-list: %s", r)
		}
	}
	if streams < 3 {
		t.Errorf("%d watch-lists, want one per resource: %q", streams, log.reqs)
	}
	t.Logf("requests: %q", log.reqs)
}
