package ipvs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// JournalFile is the name of the ownership journal under --state-dir.
const JournalFile = "ipvs-owned"

// Journal persists the part of the proxy's ownership that the kernel alone
// cannot show, so that a proxy restarted after kill -9 adopts (and, once no
// longer desired, deletes) every virtual server an earlier one created:
//
//   - virtual servers on addresses that are not bound on kube-ipvs0 and are
//     not NodePort servers on a node address — an externalIP that is the
//     node's own address, served at L4 on a port outside the NodePort range;
//     and a VIP between the creation of its virtual server and its bind;
//   - addresses about to be unbound from kube-ipvs0, whose virtual servers
//     are deleted only after the unbind (so a VIP is never local without
//     them).
//
// Entries are recorded before the kernel changes (intent first) and pruned
// after the sync to what is still unrecognisable, so the file stays small:
// empty on a node without such services.
type Journal interface {
	// Load returns the recorded addresses and virtual server keys; a journal
	// that was never saved is empty, not an error.
	Load() (addrs []netip.Addr, keys []Key, err error)
	// Save replaces the record atomically.
	Save(addrs []netip.Addr, keys []Key) error
}

// ErrJournalSyntax is returned by Load for a line it cannot parse.
var ErrJournalSyntax = errors.New("ownership journal syntax")

// FileJournal is a Journal in one text file, one entry per line:
//
//	address 203.0.113.106
//	virtual-server -t 198.51.100.1:80
//
// (the key in ipvsadm's form, as Key.String renders it). An empty record
// removes the file.
type FileJournal struct{ Path string }

// NewFileJournal returns the journal under stateDir (JournalFile).
func NewFileJournal(stateDir string) *FileJournal {
	return &FileJournal{Path: filepath.Join(stateDir, JournalFile)}
}

// Load reads the file; a missing file is an empty journal.
func (j *FileJournal) Load() ([]netip.Addr, []Key, error) {
	data, err := os.ReadFile(j.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read ownership journal: %w", err)
	}
	var addrs []netip.Addr
	var keys []Key
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "address":
			a, err := netip.ParseAddr(rest)
			if err != nil {
				return nil, nil, fmt.Errorf("%s:%d: %w: %w", j.Path, n, ErrJournalSyntax, err)
			}
			addrs = append(addrs, a)
		case "virtual-server":
			k, err := ParseKey(rest)
			if err != nil {
				return nil, nil, fmt.Errorf("%s:%d: %w: %w", j.Path, n, ErrJournalSyntax, err)
			}
			keys = append(keys, k)
		default:
			return nil, nil, fmt.Errorf("%s:%d: %w: unknown entry %q", j.Path, n, ErrJournalSyntax, kind)
		}
	}
	return addrs, keys, sc.Err()
}

// Save writes the record to a temporary file, syncs it and renames it over
// the journal, so a crash leaves either the old record or the new one.
func (j *FileJournal) Save(addrs []netip.Addr, keys []Key) error {
	if len(addrs) == 0 && len(keys) == 0 {
		if err := os.Remove(j.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove ownership journal: %w", err)
		}
		return nil
	}
	addrs = slices.Clone(addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	keys = slices.Clone(keys)
	slices.SortFunc(keys, CompareKeys)
	var b bytes.Buffer
	b.WriteString("# ipvs-proxy: what this node's proxy owns that kube-ipvs0 does not show (see ipvs.Journal)\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "address %s\n", a)
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "virtual-server %s\n", k)
	}
	if err := os.MkdirAll(filepath.Dir(j.Path), 0o755); err != nil {
		return fmt.Errorf("ownership journal: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(j.Path), "."+filepath.Base(j.Path)+".*")
	if err != nil {
		return fmt.Errorf("ownership journal: %w", err)
	}
	_, err = f.Write(b.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), j.Path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write ownership journal: %w", err)
	}
	return nil
}

// ParseKey parses a key in Key.String's form: "-t 10.96.0.10:80",
// "-u [fd00::a]:53", "--sctp-service 10.96.0.12:9".
func ParseKey(s string) (Key, error) {
	flag, hp, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return Key{}, fmt.Errorf("virtual server %q: want PROTOCOL-FLAG ADDRESS:PORT", s)
	}
	// The inverse of Key.String's protoSwitch.
	i := slices.IndexFunc(model.Protocols[:], func(p model.Protocol) bool { return protoSwitch(p) == flag })
	if i < 0 {
		return Key{}, fmt.Errorf("virtual server %q: unknown protocol flag %q", s, flag)
	}
	p := model.Protocols[i]
	ap, err := netip.ParseAddrPort(strings.TrimSpace(hp))
	if err != nil {
		return Key{}, fmt.Errorf("virtual server %q: %w", s, err)
	}
	return Key{Protocol: p, Address: ap.Addr(), Port: ap.Port()}, nil
}
