package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ipvs-proxy/ipvs-proxy/test/mdanchor"
)

// root is the repository's root, seen from this package's directory.
const root = "../.."

// page is one Markdown file: its path relative to root and its lines
// outside fenced code blocks, each with its line number.
type page struct {
	path  string
	lines []line
}

type line struct {
	n    int
	text string
}

// readPages reads README.md and every docs/*.md.
func readPages(t *testing.T) []page {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append([]string{filepath.Join(root, "README.md")}, paths...)
	var pages []page
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, page{path: filepath.ToSlash(rel), lines: prose(string(raw))})
	}
	if len(pages) < 2 {
		t.Fatalf("no docs/*.md found under %s", root)
	}
	return pages
}

// prose returns the lines of a Markdown text outside its fenced code blocks.
func prose(doc string) []line {
	var out []line
	fenced := false
	for i, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line{n: i + 1, text: l})
		}
	}
	return out
}

// mdLink matches an inline Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// codeSpan matches an inline code span; links inside one are not links.
var codeSpan = regexp.MustCompile("`[^`]*`")

// links returns the targets of the inline links on l.
func links(l string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
		out = append(out, m[1])
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of p
// (mdanchor.Anchors over its prose lines).
func anchors(p page) map[string]bool {
	text := make([]string, len(p.lines))
	for i, l := range p.lines {
		text[i] = l.text
	}
	out := map[string]bool{}
	for _, a := range mdanchor.Anchors(strings.Join(text, "\n")) {
		out[a] = true
	}
	return out
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Side by side with kube-proxy", "side-by-side-with-kube-proxy"},
		{"The multi-node bed (test/e2e/cluster)", "the-multi-node-bed-teste2ecluster"},
		{"kube-proxy on one node of the bed: `make test-fleet`", "kube-proxy-on-one-node-of-the-bed-make-test-fleet"},
		{"3. ipsets", "3-ipsets"},
		{"The seed's disaster across real nodes", "the-seeds-disaster-across-real-nodes"},
	} {
		if got := mdanchor.Anchors("## " + c.heading); len(got) != 1 || got[0] != c.want {
			t.Errorf("anchor of %q = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestLinks(t *testing.T) {
	got := links("see [a](a.md#x), [b](../README.md) and `[not](a link)` or [c](https://example.org/x)")
	want := []string{"a.md#x", "../README.md", "https://example.org/x"}
	if !slices.Equal(got, want) {
		t.Errorf("links: got %q, want %q", got, want)
	}
}

// TestDocsLinksResolve requires every relative link of README.md and
// docs/*.md to name a file or directory that exists and, with a #anchor,
// a heading of that page.
func TestDocsLinksResolve(t *testing.T) {
	pages := readPages(t)
	byPath := map[string]page{}
	for _, p := range pages {
		byPath[p.path] = p
	}
	for _, p := range pages {
		for _, l := range p.lines {
			for _, target := range links(l.text) {
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := p.path
				if file != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(p.path), file)))
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", p.path, l.n, target, dest)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				dp, ok := byPath[dest]
				if !ok {
					t.Errorf("%s:%d: link %q: an anchor into %s, which is not a checked page", p.path, l.n, target, dest)
					continue
				}
				if !anchors(dp)[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", p.path, l.n, target, dest, anchor)
				}
			}
		}
	}
}

// TestReadmeListsEveryPage requires README's "## Documentation" table to
// link every docs/*.md page.
func TestReadmeListsEveryPage(t *testing.T) {
	pages := readPages(t)
	listed := map[string]bool{}
	inTable := false
	for _, l := range pages[0].lines { // README.md
		if strings.HasPrefix(l.text, "## ") {
			inTable = strings.TrimSpace(l.text) == "## Documentation"
			continue
		}
		if inTable {
			for _, target := range links(l.text) {
				file, _, _ := strings.Cut(target, "#")
				listed[filepath.ToSlash(filepath.Clean(file))] = true
			}
		}
	}
	for _, p := range pages[1:] {
		if !listed[p.path] {
			t.Errorf("README.md's Documentation table does not link %s; add a row: | [%s](%s) | who it is for |", p.path, p.path, p.path)
		}
	}
}
