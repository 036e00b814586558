package consoleprof

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPrintFindRoundTrip(t *testing.T) {
	prof := bytes.Repeat([]byte{0x1f, 0x8b, 0x00, 0xff, '\n'}, 100)
	var console bytes.Buffer
	console.WriteString("boot noise\n")
	if err := Print(&console, "heap-check-1", []byte("older")); err != nil {
		t.Fatal(err)
	}
	console.WriteString("=== RUN TestX\n")
	if err := Print(&console, "heap-check-2", prof); err != nil {
		t.Fatal(err)
	}
	if err := Print(&console, "heap-check-1", prof); err != nil {
		t.Fatal(err)
	}
	got, err := Find(console.String(), "heap-check-2")
	if err != nil || !bytes.Equal(got, prof) {
		t.Fatalf("Find heap-check-2 = %q, %v; want the profile back", got, err)
	}
	// The last print of a name wins.
	if got, _ := Find(console.String(), "heap-check-1"); !bytes.Equal(got, prof) {
		t.Fatalf("Find heap-check-1 = %q, want the second print", got)
	}
	if _, err := Find(console.String(), "cpu"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find cpu: %v, want ErrNotFound", err)
	}
	// A directory that does not exist yet: SaveAll makes it.
	dir := filepath.Join(t.TempDir(), "size", "3000")
	paths, err := SaveAll(console.String(), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "heap-check-1.pprof"), filepath.Join(dir, "heap-check-2.pprof")}
	if len(paths) != 2 || paths[0] != want[0] || paths[1] != want[1] {
		t.Fatalf("SaveAll = %v, want %v", paths, want)
	}
	if b, _ := os.ReadFile(want[1]); !bytes.Equal(b, prof) {
		t.Fatalf("%s holds %d bytes, want the profile", want[1], len(b))
	}
}

func TestPrintRefusesNamesThatAreNotMarkers(t *testing.T) {
	for _, name := range []string{"", "Heap", "a b", "../x", "-x"} {
		if err := Print(new(bytes.Buffer), name, nil); err == nil {
			t.Errorf("Print(%q) = nil, want an error", name)
		}
	}
}

func TestFindWithoutEndMarker(t *testing.T) {
	if _, err := Find("PPROF-heap-BEGIN\nAAAA\n", "heap"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find = %v, want ErrNotFound", err)
	}
}
