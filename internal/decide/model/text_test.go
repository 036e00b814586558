package model

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestWordLine: the quoting rules, one case per class.
func TestWordLine(t *testing.T) {
	for in, want := range map[string]string{
		"":               `""`,
		"default/web":    "default/web",
		"fe80::1%eth0":   "fe80::1%eth0",
		"a b":            `"a\x20b"`,
		"x\ny":           `"x\ny"`,
		`"q"`:            `"\"q\""`,
		`a\b`:            `"a\\b"`,
		"\xff":           `"\xff"`,
		"\u2028":         `"\u2028"`,
		"mh":             "mh",
		"héllo":          "héllo",
		"bogus\n# k":     `"bogus\n#\x20k"`,
		"tab\there":      `"tab\there"`,
		"#/s0":           `"#/s0"`,
		"10.96.0.10\r\n": `"10.96.0.10\r\n"`,
	} {
		if got := Word(in); got != want {
			t.Errorf("Word(%q) = %s, want %s", in, got, want)
		}
		r := Refusal{Subject: ServiceSubject(types.NamespacedName{Namespace: in, Name: in}), Field: in, Address: in, Reason: Reason(in), Message: "m"}
		got, err := ParseRefusal(r.String())
		if err != nil || got.Subject.String() != r.Subject.String() {
			t.Errorf("Word(%q) reads back as %+v (%v)", in, got, err)
		}
		got.Subject = r.Subject
		if got != r {
			t.Errorf("Word(%q) reads back as %+v", in, got)
		}
	}
	for in, want := range map[string]string{
		"a plain message":       "a plain message",
		"two\nlines":            `two\nlines`,
		"cr\rand\u2029ps":       `cr\rand\u2029ps`,
		"bad \xff byte":         `bad \xff byte`,
		"quoted \"ok\" here":    `quoted "ok" here`,
		"replacement \ufffd ok": "replacement \ufffd ok",
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
}
