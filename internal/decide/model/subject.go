package model

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// SubjectKind is the kind of object a refusal concerns.
type SubjectKind uint8

// The kinds of subject. The zero Subject (SubjectNone) concerns no object.
const (
	SubjectNone SubjectKind = iota
	SubjectService
	SubjectNode
)

// nodePrefix is how a Node subject is written in the text layouts: "Node/NAME"
// (no namespace can be "Node": namespaces are lower-case DNS labels).
const nodePrefix = "Node"

// Subject is the object a refusal concerns: a Service (namespace and name)
// or a Node (name; Namespace is empty).
type Subject struct {
	Kind SubjectKind
	types.NamespacedName
}

// ServiceSubject is the Subject of Service n.
func ServiceSubject(n types.NamespacedName) Subject {
	return Subject{Kind: SubjectService, NamespacedName: n}
}

// NodeSubject is the Subject of the Node named name.
func NodeSubject(name string) Subject {
	return Subject{Kind: SubjectNode, NamespacedName: types.NamespacedName{Name: name}}
}

// IsZero reports whether s concerns no object.
func (s Subject) IsZero() bool { return s.Kind == SubjectNone }

// String renders the subject as the text layouts show it: "namespace/name"
// for a Service, "Node/NAME" for a Node, "" for none.
func (s Subject) String() string {
	switch s.Kind {
	case SubjectService:
		return s.Namespace + "/" + s.Name
	case SubjectNode:
		return nodePrefix + "/" + s.Name
	}
	return ""
}

// words are the parts whose concatenation is String, for Compare.
func (s Subject) words() [3]string {
	switch s.Kind {
	case SubjectService:
		return [3]string{s.Namespace, "/", s.Name}
	case SubjectNode:
		return [3]string{nodePrefix, "/", s.Name}
	}
	return [3]string{}
}

// Compare orders subjects as their String forms order (-1, 0, +1), without
// building them: the order `plan` has always printed refusals in.
func (s Subject) Compare(o Subject) int {
	a, b := s.words(), o.words()
	i, j := 0, 0
	var x, y string
	for {
		for x == "" && i < len(a) {
			x, i = a[i], i+1
		}
		for y == "" && j < len(b) {
			y, j = b[j], j+1
		}
		if x == "" || y == "" {
			switch {
			case x != "":
				return 1
			case y != "":
				return -1
			}
			return 0
		}
		n := min(len(x), len(y))
		if c := strings.Compare(x[:n], y[:n]); c != 0 {
			return c
		}
		x, y = x[n:], y[n:]
	}
}

// parseSubject reads back String's form: the text layouts' reader only.
func parseSubject(s string) Subject {
	if s == "" {
		return Subject{}
	}
	if name, ok := strings.CutPrefix(s, nodePrefix+"/"); ok {
		return NodeSubject(name)
	}
	ns, name, _ := strings.Cut(s, "/")
	return ServiceSubject(types.NamespacedName{Namespace: ns, Name: name})
}
