// Package manifest reads Services, EndpointSlices and Nodes from files or
// stdin for `ipvs-proxy plan`: multi-document YAML, JSON (one object or a
// stream of objects), and lists (`kind: List` as `kubectl get -o yaml`
// prints it, ServiceList, EndpointSliceList, NodeList). It decodes with
// client-go's scheme and never talks to the API server or the kernel.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrParse is a document that is not valid YAML or JSON, or does not
	// decode into its kind.
	ErrParse = errors.New("unparseable document")
	// ErrUnknownKind is a document whose apiVersion/kind the scheme does not
	// know, or that has none.
	ErrUnknownKind = errors.New("unknown kind")
)

// maxListDepth bounds Lists nested in Lists.
const maxListDepth = 8

// Objects are the API objects read so far.
type Objects struct {
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Nodes          []*corev1.Node
	// Ignored names every object of a known kind the proxy does not use
	// (Pods, Deployments, Endpoints, ...), as "FILE: document N: Kind ns/name".
	Ignored []string
	// UnknownFields names every object read that has fields its kind does
	// not have (a misspelt field is left out of the object, as the API
	// server's lenient decoding leaves it), as "FILE: document N: Kind
	// ns/name: unknown field ...".
	UnknownFields []string
}

// strictDeserializer decodes as client-go's scheme does and also reports
// the fields a kind does not have (runtime.IsStrictDecodingError), with
// the object decoded all the same.
var strictDeserializer = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// DocumentError is a bad document: which file, which document (0-based, in
// the order they appear), and which object when it could be named.
type DocumentError struct {
	File string
	// Index is the document's position in the file; Item is the position
	// inside a List, -1 when the document is not a List item.
	Index int
	Item  int
	// Object is "Kind namespace/name" or "apiVersion/kind" when known.
	Object string
	Err    error
}

func (e *DocumentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: document %d", e.File, e.Index)
	if e.Item >= 0 {
		fmt.Fprintf(&b, ", items[%d]", e.Item)
	}
	if e.Object != "" {
		fmt.Fprintf(&b, " (%s)", e.Object)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *DocumentError) Unwrap() error { return e.Err }

// ReadFiles reads every path in order; "-" is stdin.
func ReadFiles(paths []string, stdin io.Reader) (*Objects, error) {
	objs := &Objects{}
	for _, p := range paths {
		if p == "-" {
			if err := objs.Read("<stdin>", stdin); err != nil {
				return nil, err
			}
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		err = objs.Read(p, f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// Read adds every object of one stream to objs; name is the file name used in
// errors. It stops at the first bad document.
func (objs *Objects) Read(name string, r io.Reader) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	decoder := strictDeserializer
	for index := 0; ; index++ {
		var raw runtime.RawExtension
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &DocumentError{File: name, Index: index, Item: -1, Err: fmt.Errorf("%w: %w", ErrParse, err)}
		}
		doc := bytes.TrimSpace(raw.Raw)
		if len(doc) == 0 || bytes.Equal(doc, []byte("null")) {
			// An empty document ("---" twice, or comments only).
			index--
			continue
		}
		if err := objs.add(decoder, name, index, -1, doc, 0); err != nil {
			return err
		}
	}
}

func (objs *Objects) add(decoder runtime.Decoder, file string, index, item int, doc []byte, depth int) error {
	docErr := func(object string, err error) error {
		return &DocumentError{File: file, Index: index, Item: item, Object: object, Err: err}
	}
	// The header is read again only to name a document that was refused:
	// reading it first would parse every document, and a List whole, twice.
	head := func() header { return peek(doc) }
	obj, gvk, err := decoder.Decode(doc, nil, nil)
	if err != nil && runtime.IsStrictDecodingError(err) {
		at := fmt.Sprintf("%s: document %d", file, index)
		if item >= 0 {
			at += fmt.Sprintf(", item %d", item)
		}
		objs.UnknownFields = append(objs.UnknownFields, fmt.Sprintf("%s: %s: %v", at, describe(obj, gvk), err))
		err = nil
	}
	switch {
	case runtime.IsMissingKind(err) || runtime.IsMissingVersion(err):
		return docErr(head().String(), fmt.Errorf("%w: apiVersion and kind are required", ErrUnknownKind))
	case runtime.IsNotRegisteredError(err):
		return docErr(head().String(), fmt.Errorf("%w: %s %s is not a kind this proxy knows (want v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Node, or a List of them)",
			ErrUnknownKind, model.Word(head().APIVersion), model.Word(head().Kind)))
	case err != nil:
		return docErr(head().String(), fmt.Errorf("%w: %w", ErrParse, err))
	}
	setDefaultNamespace(obj)
	switch o := obj.(type) {
	case *corev1.Service:
		objs.Services = append(objs.Services, o)
	case *discoveryv1.EndpointSlice:
		objs.EndpointSlices = append(objs.EndpointSlices, o)
	case *corev1.Node:
		objs.Nodes = append(objs.Nodes, o)
	case *corev1.ServiceList:
		for i := range o.Items {
			setDefaultNamespace(&o.Items[i])
			objs.Services = append(objs.Services, &o.Items[i])
		}
	case *discoveryv1.EndpointSliceList:
		for i := range o.Items {
			setDefaultNamespace(&o.Items[i])
			objs.EndpointSlices = append(objs.EndpointSlices, &o.Items[i])
		}
	case *corev1.NodeList:
		for i := range o.Items {
			objs.Nodes = append(objs.Nodes, &o.Items[i])
		}
	case *corev1.List:
		if depth >= maxListDepth {
			return docErr("List", fmt.Errorf("%w: Lists nested deeper than %d", ErrParse, maxListDepth))
		}
		for i, it := range o.Items {
			// Items of a nested List are reported by their position in the
			// outermost List.
			at := i
			if item >= 0 {
				at = item
			}
			if err := objs.add(decoder, file, index, at, it.Raw, depth+1); err != nil {
				return err
			}
		}
	default:
		switch gvk.Kind {
		case "Service", "EndpointSlice", "Node", "ServiceList", "EndpointSliceList", "NodeList":
			return docErr(head().String(), fmt.Errorf("%w: %s %s is not supported (want v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Node)",
				ErrUnknownKind, model.Word(head().APIVersion), model.Word(head().Kind)))
		}
		objs.Ignored = append(objs.Ignored, fmt.Sprintf("%s: document %d: %s", file, index, describe(obj, gvk)))
	}
	return nil
}

// header is what can be read of any document, even one that does not decode.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// peek reads the header of a document; fields that do not decode stay empty.
func peek(doc []byte) header {
	var h struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
		Metadata   any `json:"metadata"`
	}
	var out header
	if json.Unmarshal(doc, &h) != nil {
		return out
	}
	out.APIVersion, _ = h.APIVersion.(string)
	out.Kind, _ = h.Kind.(string)
	if m, ok := h.Metadata.(map[string]any); ok {
		out.Metadata.Name, _ = m["name"].(string)
		out.Metadata.Namespace, _ = m["namespace"].(string)
	}
	return out
}

// String is "Kind namespace/name", as much of it as is known, each part a
// model.Word: a value from the file cannot add a line to a message.
func (h header) String() string {
	var parts []string
	if h.Kind != "" {
		parts = append(parts, model.Word(h.Kind))
	}
	if name := objectName(h.Metadata.Namespace, h.Metadata.Name); name != "" {
		parts = append(parts, model.Word(name))
	}
	return strings.Join(parts, " ")
}

// objectName is "namespace/name", or "name" without a namespace.
func objectName(namespace, name string) string {
	if namespace != "" {
		return namespace + "/" + name
	}
	return name
}

// describe names an object as "Kind namespace/name".
func describe(obj runtime.Object, gvk *schema.GroupVersionKind) string {
	kind := gvk.Kind
	if m, ok := obj.(interface {
		GetNamespace() string
		GetName() string
	}); ok {
		return model.Word(kind) + " " + model.Word(objectName(m.GetNamespace(), m.GetName()))
	}
	return model.Word(kind)
}

// setDefaultNamespace gives namespaced objects without one the "default"
// namespace, as kubectl apply would.
func setDefaultNamespace(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Service:
		if o.Namespace == "" {
			o.Namespace = corev1.NamespaceDefault
		}
	case *discoveryv1.EndpointSlice:
		if o.Namespace == "" {
			o.Namespace = corev1.NamespaceDefault
		}
	}
}
