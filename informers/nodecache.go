package informers

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// NodeAddressFile is the name of the node address cache under --state-dir.
const NodeAddressFile = "node-addresses.json"

// DefaultDeletedNodeGrace is --deleted-node-grace-period's default: how
// long the addresses of a Node that left the API stay protected.
const DefaultDeletedNodeGrace = 24 * time.Hour

// ErrNoCache is returned by ReadNodeAddresses when no cache was ever written.
var ErrNoCache = errors.New("no node address cache")

// NodeAddresses is the node address cache file: every Node's
// status.addresses (IPs only), as last seen from the API server, and the
// Nodes deleted since, for their grace period.
//
//	{"updated": "2026-11-24T10:00:00Z",
//	 "nodes": {"n1": ["10.0.0.1"], "n2": ["10.0.0.2"]},
//	 "lastSeen": {"n2": "2026-11-24T09:58:00Z"}}
type NodeAddresses struct {
	// Updated is when the file was written.
	Updated time.Time `json:"updated"`
	// Nodes maps a Node name to its addresses, sorted: every Node in the
	// API when the file was written, and every deleted one not yet past
	// its grace period (so that a reader that knows nothing of LastSeen
	// protects them too).
	Nodes map[string][]netip.Addr `json:"nodes"`
	// LastSeen maps each deleted Node in Nodes to when this node's proxy
	// last saw it in the API (at the latest, when that proxy started);
	// Nodes in the API have no entry.
	LastSeen map[string]time.Time `json:"lastSeen,omitempty"`
	// APIServers are the API server's endpoints (the default/kubernetes
	// EndpointSlices' addresses) as last seen: protected while the API
	// server does not answer (`run` at start, `recover` offline).
	APIServers []netip.Addr `json:"apiServers,omitempty"`
}

// Protected are the Nodes whose addresses the file protects at now: every
// Node in the API when it was written, and every deleted one last seen
// less than grace before now (with model.Node.LastSeen set), sorted by
// name.
func (n NodeAddresses) Protected(now time.Time, grace time.Duration) []model.Node {
	out := make([]model.Node, 0, len(n.Nodes))
	for name, as := range n.Nodes {
		seen, deleted := n.LastSeen[name]
		if deleted && now.Sub(seen) >= grace {
			continue
		}
		node := model.Node{Name: name, Addresses: slices.Clone(as)}
		if deleted {
			node.LastSeen = seen
		}
		out = append(out, node)
	}
	slices.SortFunc(out, func(a, b model.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// NodeAddressCache keeps the node address cache file under a state
// directory up to date: written atomically (temporary file, fsync, rename)
// whenever the addresses change, so that `recover` can read it while the
// API server is unreachable. It remembers a deleted Node for a grace
// period: a Service asking for the address of a Node deleted by mistake
// must not be bound on every node, or the Node's kubelet could never
// register it again. Safe for concurrent use.
type NodeAddressCache struct {
	dir   string
	grace time.Duration
	now   func() time.Time

	mu sync.Mutex
	// nodes are every Node known, in the API or deleted; lastSeen the
	// deleted ones'.
	nodes    map[string][]netip.Addr
	lastSeen map[string]time.Time
	api      []netip.Addr
	// written is what the file holds (nil: not written by this cache).
	written *NodeAddresses
}

// NewNodeAddressCache returns a cache writing under dir (created if
// missing) that remembers a deleted Node for grace.
func NewNodeAddressCache(dir string, grace time.Duration) *NodeAddressCache {
	return &NodeAddressCache{dir: dir, grace: grace, now: time.Now,
		nodes: map[string][]netip.Addr{}, lastSeen: map[string]time.Time{}}
}

// Path is the cache file's path.
func (c *NodeAddressCache) Path() string { return filepath.Join(c.dir, NodeAddressFile) }

// Load reads the file an earlier run wrote, if any (a missing file is no
// error): until the next Set its Nodes are protected, and a Node listed in
// it as in the API that the next Set does not list is taken as deleted
// from then on.
func (c *NodeAddressCache) Load() error {
	f, err := ReadNodeAddresses(c.dir)
	if errors.Is(err, ErrNoCache) {
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, as := range f.Nodes {
		c.nodes[name] = normAddrs(as)
	}
	maps.Copy(c.lastSeen, f.LastSeen)
	c.api = normAddrs(f.APIServers)
	return nil
}

// Set records every Node in the API now and writes the file if anything
// changed: a Node known before and missing from nodes is deleted, last
// seen now; a deleted Node past its grace period is forgotten.
func (c *NodeAddressCache) Set(nodes map[string][]netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UTC()
	for name := range c.nodes {
		if _, live := nodes[name]; !live {
			if _, deleted := c.lastSeen[name]; !deleted {
				c.lastSeen[name] = now
			}
		}
	}
	for name, as := range nodes {
		c.nodes[name] = normAddrs(as)
		delete(c.lastSeen, name)
	}
	for name, seen := range c.lastSeen {
		if now.Sub(seen) >= c.grace {
			delete(c.lastSeen, name)
			delete(c.nodes, name)
		}
	}
	return c.write(now)
}

// SetAPIServers records the API server's endpoints and writes the file if
// they changed.
func (c *NodeAddressCache) SetAPIServers(addrs []netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.api = normAddrs(addrs)
	return c.write(c.now().UTC())
}

// write writes the file when it would differ from what it holds; c.mu is
// held.
func (c *NodeAddressCache) write(now time.Time) error {
	f := NodeAddresses{Nodes: maps.Clone(c.nodes), LastSeen: maps.Clone(c.lastSeen), APIServers: slices.Clone(c.api)}
	if c.written != nil && maps.EqualFunc(c.written.Nodes, f.Nodes, slices.Equal) && maps.Equal(c.written.LastSeen, f.LastSeen) &&
		slices.Equal(c.written.APIServers, f.APIServers) {
		return nil
	}
	f.Updated = now
	if err := writeAtomic(c.Path(), f); err != nil {
		return err
	}
	c.written = &f
	return nil
}

// APIServers are the API server's endpoints as last recorded (from the
// file Load read, until SetAPIServers).
func (c *NodeAddressCache) APIServers() []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.api)
}

// Remembered are the deleted Nodes still protected now (model.Node with
// LastSeen set), sorted by name: what the API no longer lists, for the
// guard.
func (c *NodeAddressCache) Remembered() []model.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := NodeAddresses{Nodes: map[string][]netip.Addr{}, LastSeen: c.lastSeen}
	for name := range c.lastSeen {
		f.Nodes[name] = c.nodes[name]
	}
	return f.Protected(c.now(), c.grace)
}

// Protected are every Node the cache protects now, in the API (as far as
// the cache knows: before the first Set, what the file said) or deleted
// within the grace period, sorted by name. `run` protects them before the
// informer caches have synced.
func (c *NodeAddressCache) Protected() []model.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return NodeAddresses{Nodes: c.nodes, LastSeen: c.lastSeen}.Protected(c.now(), c.grace)
}

func normAddrs(as []netip.Addr) []netip.Addr {
	as = slices.Clone(as)
	slices.SortFunc(as, netip.Addr.Compare)
	return slices.Compact(as)
}

func writeAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(append(data, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return nil
}

// ReadNodeAddresses reads the node address cache under stateDir, offline.
// A missing file gives ErrNoCache.
func ReadNodeAddresses(stateDir string) (NodeAddresses, error) {
	return ReadNodeAddressFile(filepath.Join(stateDir, NodeAddressFile))
}

// ReadNodeAddressFile reads a node address cache file (`plan
// --node-cache`). A missing file gives ErrNoCache.
func ReadNodeAddressFile(path string) (NodeAddresses, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return NodeAddresses{}, fmt.Errorf("%s: %w", path, ErrNoCache)
	}
	if err != nil {
		return NodeAddresses{}, fmt.Errorf("read node address cache: %w", err)
	}
	var n NodeAddresses
	if err := json.Unmarshal(data, &n); err != nil {
		return NodeAddresses{}, fmt.Errorf("decode %s: %w", path, err)
	}
	return n, nil
}

// WithCachedNodes adds to nodes the cached ones it does not name (a
// partial input; a Node deleted from the API), sorted by name as Convert
// sorts them.
func WithCachedNodes(nodes, cached []model.Node) []model.Node {
	out := slices.Clone(nodes)
	for _, c := range cached {
		if !slices.ContainsFunc(nodes, func(n model.Node) bool { return n.Name == c.Name }) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b model.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
