// Package consoleprof carries pprof profiles of the proxy out of the test
// VM through its console: the guest prints each one in base64 between
// markers that name it (the host's root is read-only in the guest, so a
// file written there never reaches the host), and the host test finds them
// in the console it kept and writes them to files. It never talks to the
// proxy itself; the guest test fetches the profile and hands it over.
package consoleprof

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrNotFound is a profile whose markers are not in the console.
var ErrNotFound = errors.New("no such profile in the console")

// validName is what a profile's name may be: it becomes a marker and a
// file name.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// markers frame the profile named name ("heap", "cpu", "heap-check-2").
func markers(name string) (begin, end string) {
	return "PPROF-" + name + "-BEGIN", "PPROF-" + name + "-END"
}

// Print writes prof to w (the guest's stdout, which is the console) in
// base64 lines of 76 characters between name's markers, in one write.
func Print(w io.Writer, name string, prof []byte) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("profile name %q: want lower-case letters, digits and dashes", name)
	}
	begin, end := markers(name)
	enc := base64.StdEncoding.EncodeToString(prof)
	var b strings.Builder
	b.WriteString(begin + "\n")
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\n")
		enc = enc[76:]
	}
	b.WriteString(enc + "\n" + end + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Find is the profile named name that console holds (the last one, when
// printed more than once).
func Find(console, name string) ([]byte, error) {
	begin, end := markers(name)
	i := strings.LastIndex(console, begin+"\n")
	if i < 0 {
		return nil, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	enc, _, ok := strings.Cut(console[i+len(begin)+1:], end)
	if !ok {
		return nil, fmt.Errorf("%s (no end marker): %w", name, ErrNotFound)
	}
	enc = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' {
			return -1
		}
		return r
	}, enc)
	prof, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	return prof, nil
}

// beginLine matches a begin marker at the start of a line.
var beginLine = regexp.MustCompile(`(?m)^PPROF-([a-z0-9][a-z0-9-]*)-BEGIN\r?$`)

// SaveAll writes every profile console holds to dir (made if missing) as
// NAME.pprof and returns the paths, in the order they were printed.
func SaveAll(console, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profiles directory: %w", err)
	}
	var paths []string
	seen := map[string]bool{}
	for _, m := range beginLine.FindAllStringSubmatch(console, -1) {
		name := m[1]
		if seen[name] {
			continue
		}
		seen[name] = true
		prof, err := Find(console, name)
		if err != nil {
			return paths, err
		}
		path := filepath.Join(dir, name+".pprof")
		if err := os.WriteFile(path, prof, 0o644); err != nil {
			return paths, fmt.Errorf("write profile %s: %w", name, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}
