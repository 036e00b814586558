// Package informers is the proxy's view of the API server. It owns:
//
//   - the client-go shared informers of Services and EndpointSlices
//     (kube-proxy's label selector) and Nodes, with the transform that
//     keeps only the fields the proxy reads (strip.go): Services and
//     EndpointSlices in cache entries of the proxy's own type
//     (cachedservice.go, cachedslice.go), rebuilt as API objects only
//     while they are converted,
//     listed in pages transformed as they arrive when the API server
//     serves no watch-list (PagedList, pagedlist.go);
//   - the change tracker: which Services changed, whether Node addresses or
//     this node's labels did, the oldest endpoint trigger time (watch.go);
//   - the Node address cache, the one file it writes:
//     --state-dir/node-addresses.json (NodeAddressFile, written atomically
//     on change, nodecache.go), read by the guard and `recover` while the
//     API server is unreachable.
//
// It converts what it caches through internal/decide/convert, which owns the
// conversion into the model. It never writes to the API server (Events are internal/events') and
// never touches the kernel.
package informers
