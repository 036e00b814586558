package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// TestEveryReasonHasAScope: every Reason constant declared in this package
// is classified, so a new reason cannot fall back to ScopeNode unnoticed.
func TestEveryReasonHasAScope(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "model.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok || vs.Type == nil {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
			return true
		}
		for _, name := range vs.Names {
			n++
			lit := vs.Values[0].(*ast.BasicLit).Value
			if _, ok := reasonScopes[Reason(lit[1:len(lit)-1])]; !ok {
				t.Errorf("%s (%s) has no scope in reasonScopes", name.Name, lit)
			}
		}
		return true
	})
	if n != len(reasonScopes) {
		t.Errorf("%d Reason constants, %d scopes", n, len(reasonScopes))
	}
	if ReasonLocalAddress.Scope() != ScopeNode || ReasonUnknownScheduler.Scope() != ScopeCluster || Reason("Unknown").Scope() != ScopeNode {
		t.Error("scopes")
	}
}
