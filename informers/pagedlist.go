package informers

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// DefaultPageSize is the number of objects PagedList asks for per page:
// client-go's pager's.
const DefaultPageSize = 500

// maxListRestarts bounds how often one PagedList.List starts again after
// its snapshot expired (410 Gone) between two pages; the reflector then
// backs off and lists again.
const maxListRestarts = 3

// ErrListRestarts is wrapped by the error of a list whose snapshot expired
// between pages more than maxListRestarts times in a row.
var ErrListRestarts = errors.New("list snapshot expired between pages")

// PagedList is the list half of an informer's ListerWatcher that never
// holds a whole list of API objects (`kubectl get --chunk-size`): it asks
// the API server for PageSize objects at a time, following the continue
// token through one consistent snapshot, and passes every object of a page
// through Transform before it asks for the next one, so that the decoded
// page becomes garbage while the list goes on. It returns the transformed
// objects as one list carrying the snapshot's resourceVersion (the first
// page's: every continued page is read at it), from which the reflector
// fills the cache and starts its watch.
//
// client-go's own pager keeps every decoded page until the last one and
// hands the whole list to the informer, which transforms it only then: at
// 10,000 Services the decoded EndpointSlices alone are several times the
// lean cache (see BenchmarkMemoryBreakdown, list-unpaged and list-paged).
//
// Every list is a consistent read (resourceVersion ""), whatever the
// reflector asks: the API server's watch cache ignores the page size of a
// list at resourceVersion "0", the reflector's first, and a consistent
// read is never older than what the reflector asked for. When the snapshot
// expires between two pages (410 Gone: etcd compacted it), the list starts
// again from the first page at the newest state, up to maxListRestarts
// times; it never falls back to one unpaged list.
//
// Watch is WatchFunc, unchanged: a watch-list (the reflector's streaming
// initial list, client-go's WatchListClient) goes to the API server as
// before, and only a server that does not serve one makes the reflector
// call List.
type PagedList struct {
	// ListPage lists one page: the typed client's List with the
	// informer's options (label selector) applied.
	ListPage func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	// WatchFunc is the watch half, with the same options applied.
	WatchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// Transform is the informer's transform (nil: none).
	Transform cache.TransformFunc
	// PageSize is the limit of each page; 0 means DefaultPageSize.
	PageSize int64
	// Client is the clientset the functions call; a fake clientset says
	// through it that it cannot serve a watch-list.
	Client any
}

var (
	_ cache.ListerWatcher            = (*PagedList)(nil)
	_ cache.ListerWatcherWithContext = (*PagedList)(nil)
)

// ListWithContext lists every object, page by page, transformed. The
// options' resourceVersion, match, limit and continue token are the
// reflector's and are replaced; the others (selectors) are kept.
func (p *PagedList) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	for restart := 0; ; restart++ {
		list, err := p.snapshot(ctx, opts)
		if err == nil {
			return list, nil
		}
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			return nil, err
		}
		if restart == maxListRestarts {
			return nil, fmt.Errorf("%w %d times: %w", ErrListRestarts, restart+1, err)
		}
	}
}

// snapshot lists every page of one snapshot.
func (p *PagedList) snapshot(ctx context.Context, opts metav1.ListOptions) (*metav1.List, error) {
	opts.ResourceVersion, opts.ResourceVersionMatch, opts.Continue = "", "", ""
	opts.Limit = p.PageSize
	if opts.Limit <= 0 {
		opts.Limit = DefaultPageSize
	}
	out := &metav1.List{}
	for n := 1; ; n++ {
		first := n == 1
		page, err := p.ListPage(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list page %d: %w", n, err)
		}
		lm, err := meta.ListAccessor(page)
		if err != nil {
			return nil, fmt.Errorf("list page: %w", err)
		}
		if first {
			out.ResourceVersion = lm.GetResourceVersion()
		}
		items, err := meta.ExtractList(page)
		if err != nil {
			return nil, fmt.Errorf("list page items: %w", err)
		}
		if first && lm.GetContinue() == "" {
			out.Items = make([]runtime.RawExtension, 0, len(items))
		} else if first {
			// RemainingItemCount is set by the API server for pages
			// without a label selector.
			if n := lm.GetRemainingItemCount(); n != nil && *n > 0 {
				out.Items = make([]runtime.RawExtension, 0, int64(len(items))+*n)
			}
		}
		for _, it := range items {
			if p.Transform != nil {
				t, err := p.Transform(it)
				if err != nil {
					return nil, fmt.Errorf("transform: %w", err)
				}
				if o, ok := t.(runtime.Object); ok {
					it = o
				}
			}
			out.Items = append(out.Items, runtime.RawExtension{Object: it})
		}
		opts.Continue = lm.GetContinue()
		if opts.Continue == "" {
			return out, nil
		}
	}
}

// List is ListWithContext without a context.
func (p *PagedList) List(opts metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), opts)
}

// WatchWithContext watches through WatchFunc.
func (p *PagedList) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return p.WatchFunc(ctx, opts)
}

// Watch is WatchWithContext without a context.
func (p *PagedList) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector whether the
// client can serve a watch-list, as client-go's own ListWatch does: only a
// client that says it cannot (a fake clientset) cannot.
func (p *PagedList) IsWatchListSemanticsUnSupported() bool {
	c, ok := p.Client.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && c.IsWatchListSemanticsUnSupported()
}

// pagedInformer is factory's informer of obj, listed by a PagedList of
// list and watch. It has no index: the generated informers' namespace
// index (a set of every key per namespace) serves only a lister's List of
// one namespace, which the Watcher never asks for (its lookups are by key,
// its lists of everything), and cost memory for nothing (see
// BenchmarkMemoryBreakdown).
func pagedInformer(factory informers.SharedInformerFactory, obj runtime.Object, client any, transform cache.TransformFunc, pageSize int64,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	return factory.InformerFor(obj, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		lw := &PagedList{ListPage: list, WatchFunc: watchFn, Transform: transform, PageSize: pageSize, Client: client}
		return cache.NewSharedIndexInformerWithOptions(lw, obj, cache.SharedIndexInformerOptions{ResyncPeriod: resync,
			Indexers: cache.Indexers{}})
	})
}

// listOf adapts a typed client's List to PagedList's: a nil page is no
// object.
func listOf[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), sel string) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		opts.LabelSelector = sel
		l, err := list(ctx, opts)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// watchOf is a typed client's Watch with the selector.
func watchOf(watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), sel string) func(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.LabelSelector = sel
		return watchFn(ctx, opts)
	}
}
