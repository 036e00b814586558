package model

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestSubjectCompareIsTextOrder: Compare orders subjects exactly as their
// text forms order, also where a field-by-field order would not ("a-b/x"
// sorts before "a/x": '-' < '/'), so `plan` prints refusals in the order
// it always has.
func TestSubjectCompareIsTextOrder(t *testing.T) {
	names := []string{"", "a", "a-b", "a.b", "ab", "Node", "N", "z", "0"}
	var subjects []Subject
	subjects = append(subjects, Subject{})
	for _, ns := range names {
		for _, n := range names {
			subjects = append(subjects, ServiceSubject(types.NamespacedName{Namespace: ns, Name: n}))
		}
		subjects = append(subjects, NodeSubject(ns))
	}
	for _, a := range subjects {
		for _, b := range subjects {
			if got, want := a.Compare(b), strings.Compare(a.String(), b.String()); got != want {
				t.Errorf("Compare(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// TestSubjectText: a Node reads as "Node/NAME", a Service as
// "namespace/name", none as "", and each reads back.
func TestSubjectText(t *testing.T) {
	for _, c := range []struct {
		s    Subject
		text string
	}{
		{Subject{}, ""},
		{NodeSubject("worker-1"), "Node/worker-1"},
		{ServiceSubject(types.NamespacedName{Namespace: "default", Name: "web"}), "default/web"},
	} {
		if got := c.s.String(); got != c.text {
			t.Errorf("%+v reads %q, want %q", c.s, got, c.text)
		}
		if got := parseSubject(c.text); got != c.s {
			t.Errorf("%q parses as %+v, want %+v", c.text, got, c.s)
		}
	}
}
