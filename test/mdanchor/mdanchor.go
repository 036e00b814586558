// Package mdanchor names the anchors GitHub gives a Markdown page's
// headings, so that tests can check that a link into docs/ (a runbook URL,
// a documented deviation) lands on a section that exists.
package mdanchor

import (
	"os"
	"strconv"
	"strings"
	"unicode"
)

// Anchors are the anchors of markdown's headings, in page order: the
// heading lowercased, letters (any script), digits, '-' and '_' kept, spaces turned into
// '-', every other character dropped; a repeated anchor gets "-1", "-2", ...
// as GitHub numbers them. Lines inside fenced code blocks are not headings.
func Anchors(markdown string) []string {
	var out []string
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		h, ok := strings.CutPrefix(l, "#")
		if fenced || !ok {
			continue
		}
		h = strings.TrimLeft(h, "#")
		if h != "" && h[0] != ' ' {
			continue // "#tag", not a heading
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}

// File is Anchors of the Markdown file at path.
func File(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Anchors(string(raw)), nil
}
