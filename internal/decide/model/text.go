package model

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Word renders a value that came from the API (a name, a field path, an
// address as written, an annotation) as one word of a text layout: `plan`'s
// "# refused" lines, Event notes, error messages. A non-empty value of
// printable characters without spaces, quotes or backslashes is shown as
// written, unless it starts with '#' (which begins a section header of
// `plan`'s text); anything else is Go-quoted (strconv.Quote) with its spaces
// escaped as \x20, so that no value can add a word or a line or start a
// line like a header, and strconv.Unquote gives it back.
func Word(s string) string {
	if s != "" && s[0] != '#' && !strings.ContainsFunc(s, unsafeInWord) {
		return s
	}
	return strings.ReplaceAll(strconv.Quote(s), " ", `\x20`)
}

func unsafeInWord(r rune) bool {
	return r == '"' || r == '\\' || r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r)
}

// Line renders a message as one line: every character that is not
// printable (newlines, carriage returns, other control characters, line and
// paragraph separators, invalid UTF-8) is written as its Go escape, so that
// a message that carries an API value nobody quoted still cannot add a
// line. Spaces are kept.
func Line(s string) string {
	if !strings.ContainsFunc(s, unsafeInLine) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16))
				continue
			}
		}
		if !unsafeInLine(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

func unsafeInLine(r rune) bool {
	return r != ' ' && (r == utf8.RuneError || !unicode.IsPrint(r))
}

// ParseRefusal reads back a line written by Refusal.String: the subject,
// field, address and reason exactly, the message as Line rendered it.
func ParseRefusal(line string) (Refusal, error) {
	words := strings.SplitN(line, " ", 5)
	if len(words) != 5 || !strings.HasSuffix(words[3], ":") {
		return Refusal{}, fmt.Errorf("refusal %q: want SUBJECT FIELD ADDRESS REASON: MESSAGE", line)
	}
	words[3] = strings.TrimSuffix(words[3], ":")
	for i, w := range words[:4] {
		if strings.HasPrefix(w, `"`) {
			s, err := strconv.Unquote(w)
			if err != nil {
				return Refusal{}, fmt.Errorf("refusal %q: word %d: %w", line, i+1, err)
			}
			words[i] = s
		}
	}
	return Refusal{Subject: parseSubject(words[0]), Field: words[1], Address: words[2], Reason: Reason(words[3]), Message: words[4]}, nil
}
