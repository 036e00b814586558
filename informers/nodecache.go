package informers

import (
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
)

// NodeAddressFile is the name of the node address cache under --state-dir.
const NodeAddressFile = "node-addresses.json"

// ErrNoCache is returned by ReadNodeAddresses when no cache was ever written.
var ErrNoCache = errors.New("no node address cache")

// NodeAddresses is the node address cache file: every Node's
// status.addresses (IPs only), as last seen from the API server.
type NodeAddresses struct {
	// Updated is when the file was written.
	Updated time.Time `json:"updated"`
	// Nodes maps a Node name to its addresses, sorted.
	Nodes map[string][]netip.Addr `json:"nodes"`
}

// All returns every cached node address, sorted and without duplicates.
func (n NodeAddresses) All() []netip.Addr {
	var out []netip.Addr
	for _, as := range n.Nodes {
		out = append(out, as...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// NodeAddressCache keeps the node address cache file under a state
// directory up to date: written atomically (temporary file, fsync, rename)
// whenever the addresses change, so that `recover` can read it while the
// API server is unreachable.
type NodeAddressCache struct {
	dir string
	now func() time.Time

	mu   sync.Mutex
	last map[string][]netip.Addr
}

// NewNodeAddressCache returns a cache writing under dir (created if missing).
func NewNodeAddressCache(dir string) *NodeAddressCache {
	return &NodeAddressCache{dir: dir, now: time.Now}
}

// Path is the cache file's path.
func (c *NodeAddressCache) Path() string { return filepath.Join(c.dir, NodeAddressFile) }

// Set records every Node's addresses and writes the file if they differ
// from what was last written.
func (c *NodeAddressCache) Set(nodes map[string][]netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	norm := make(map[string][]netip.Addr, len(nodes))
	for name, as := range nodes {
		as = slices.Clone(as)
		slices.SortFunc(as, netip.Addr.Compare)
		norm[name] = slices.Compact(as)
	}
	if c.last != nil && maps.EqualFunc(c.last, norm, slices.Equal) {
		return nil
	}
	if err := writeAtomic(c.Path(), NodeAddresses{Updated: c.now().UTC(), Nodes: norm}); err != nil {
		return err
	}
	c.last = norm
	return nil
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
	path := filepath.Join(stateDir, NodeAddressFile)
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
