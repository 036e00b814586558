package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// names lists what was read as "Kind ns/name" in reading order per kind.
func names(o *Objects) []string {
	var out []string
	for _, s := range o.Services {
		out = append(out, "Service "+s.Namespace+"/"+s.Name)
	}
	for _, s := range o.EndpointSlices {
		out = append(out, "EndpointSlice "+s.Namespace+"/"+s.Name)
	}
	for _, n := range o.Nodes {
		out = append(out, "Node "+n.Name)
	}
	return out
}

const svcA = `apiVersion: v1
kind: Service
metadata: {name: a}
spec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}
`

func TestRead(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		ignored []string
	}{
		{
			name: "multi-document YAML with empty and comment-only documents",
			in: "---\n# nothing\n---\n" + svcA + "---\n---\n" +
				"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: a-1, namespace: web, labels: {kubernetes.io/service-name: a}}\naddressType: IPv4\nendpoints: []\n" +
				"---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
			want: []string{"Service default/a", "EndpointSlice web/a-1", "Node n1"},
		},
		{
			name: "JSON stream",
			in:   `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}} {"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"x"}}`,
			want: []string{"Service x/s", "Node n1"},
		},
		{
			name: "kubectl get -o yaml List with irrelevant kinds",
			in: `apiVersion: v1
kind: List
metadata: {resourceVersion: ""}
items:
- apiVersion: v1
  kind: Service
  metadata: {name: s1, namespace: ns}
- apiVersion: v1
  kind: Pod
  metadata: {name: p1, namespace: ns}
- apiVersion: v1
  kind: List
  items:
  - apiVersion: v1
    kind: Node
    metadata: {name: nested}
`,
			want:    []string{"Service ns/s1", "Node nested"},
			ignored: []string{"f: document 0: Pod ns/p1"},
		},
		{
			name: "typed lists",
			in: `apiVersion: v1
kind: ServiceList
items:
- metadata: {name: s1}
- metadata: {name: s2, namespace: kube-system}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSliceList
items:
- metadata: {name: e1}
  addressType: IPv6
---
apiVersion: v1
kind: NodeList
items:
- metadata: {name: n1}
- metadata: {name: n2}
`,
			want: []string{"Service default/s1", "Service kube-system/s2", "EndpointSlice default/e1", "Node n1", "Node n2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &Objects{}
			if err := o.Read("f", strings.NewReader(tt.in)); err != nil {
				t.Fatalf("Read: %v", err)
			}
			if got := strings.Join(names(o), "; "); got != strings.Join(tt.want, "; ") {
				t.Errorf("read %q, want %q", got, strings.Join(tt.want, "; "))
			}
			if got := strings.Join(o.Ignored, "; "); got != strings.Join(tt.ignored, "; ") {
				t.Errorf("ignored %q, want %q", got, strings.Join(tt.ignored, "; "))
			}
		})
	}
}

func TestReadErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		is   error
		msg  string
	}{
		{"broken YAML in the second document", svcA + "---\napiVersion: v1\nkind: Service\n  metadata: {name: x\n",
			ErrParse, "f.yaml: document 1: unparseable document: "},
		{"unknown kind", svcA + "---\napiVersion: v1\nkind: Servcie\nmetadata: {name: typo}\n",
			ErrUnknownKind, "f.yaml: document 1 (Servcie typo): unknown kind: v1 Servcie is not a kind"},
		{"no kind", "metadata: {name: a}\n",
			ErrUnknownKind, "f.yaml: document 0 (a): unknown kind: apiVersion and kind are required"},
		{"wrong field type", "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: web}\nspec: {ports: [{port: http}]}\n",
			ErrParse, "f.yaml: document 0 (Service web/a): unparseable document: "},
		{"old EndpointSlice version", "apiVersion: discovery.k8s.io/v1beta1\nkind: EndpointSlice\nmetadata: {name: e}\n",
			ErrUnknownKind, "f.yaml: document 0 (EndpointSlice e): unknown kind: discovery.k8s.io/v1beta1 EndpointSlice is not supported"},
		{"bad item in a List", "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(strings.TrimSpace(svcA), "\n", "\n  ") + "\n- apiVersion: v1\n  kind: Bogus\n  metadata: {name: b}\n",
			ErrUnknownKind, "f.yaml: document 0, items[1] (Bogus b): unknown kind"},
		{"not an object", "just a string\n", ErrParse, "f.yaml: document 0: unparseable document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (&Objects{}).Read("f.yaml", strings.NewReader(tt.in))
			if !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
			var de *DocumentError
			if !errors.As(err, &de) {
				t.Fatalf("err %T is not a *DocumentError", err)
			}
			if !strings.HasPrefix(err.Error(), tt.msg) {
				t.Errorf("err = %q, want prefix %q", err, tt.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(a, []byte(svcA), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := ReadFiles([]string{a, "-"}, strings.NewReader("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(o), "; "); got != "Service default/a; Node n1" {
		t.Errorf("got %q", got)
	}

	_, err = ReadFiles([]string{filepath.Join(dir, "missing.yaml")}, nil)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: err = %v", err)
	}
	_, err = ReadFiles([]string{a, "-"}, strings.NewReader("kind: [\n"))
	if !errors.Is(err, ErrParse) || !strings.HasPrefix(err.Error(), "<stdin>: document 0") {
		t.Errorf("bad stdin: err = %v", err)
	}
}
