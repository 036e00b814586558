package chart

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// commonLabels are the labels that mark objects rather than select them:
// Helm's own, which only the chart sets, and part-of, which kustomize sets
// on the base's objects only and the chart on all.
var commonLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
	"app.kubernetes.io/version", "app.kubernetes.io/part-of"}

// generatedName matches the names kustomize's configMapGenerator gives,
// with a content hash, and references to them; the chart rolls the pods
// with its checksum/config annotation instead.
var generatedName = regexp.MustCompile(`"(ipvs-proxy-(?:config|apiserver))-[a-z0-9]{10}"`)

// Comparable returns objs by "Kind namespace/name" with what may differ
// between the chart and the kustomizations taken out: Namespaces (the
// chart installs into the release's), commonLabels, the chart's
// checksum/config annotation, kustomize's ConfigMap name hashes, and the
// comments of the config file (compared as YAML).
func Comparable(objs []*unstructured.Unstructured) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		b, err := json.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		b = generatedName.ReplaceAll(b, []byte(`"$1"`))
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: m}
		labels := u.GetLabels()
		for _, l := range commonLabels {
			delete(labels, l)
		}
		if len(labels) == 0 {
			unstructured.RemoveNestedField(m, "metadata", "labels")
		} else {
			u.SetLabels(labels)
		}
		unstructured.RemoveNestedField(m, "spec", "template", "metadata", "annotations", "checksum/config")
		if a, _, _ := unstructured.NestedMap(m, "spec", "template", "metadata", "annotations"); a != nil && len(a) == 0 {
			unstructured.RemoveNestedField(m, "spec", "template", "metadata", "annotations")
		}
		if u.GetKind() == "ConfigMap" {
			if s, ok, _ := unstructured.NestedString(m, "data", "config.yaml"); ok {
				var parsed map[string]any
				if err := yaml.Unmarshal([]byte(s), &parsed); err != nil {
					return nil, fmt.Errorf("ConfigMap %s config.yaml: %w", u.GetName(), err)
				}
				if err := unstructured.SetNestedField(m, parsed, "data", "config.yaml"); err != nil {
					return nil, err
				}
			}
		}
		key := u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s rendered twice", key)
		}
		out[key] = m
	}
	return out, nil
}

// Diff returns one line per object that only one side renders and a diff
// (-kustomize +chart) per object they render differently.
func Diff(kustomize, chart []*unstructured.Unstructured) ([]string, error) {
	k, err := Comparable(kustomize)
	if err != nil {
		return nil, err
	}
	c, err := Comparable(chart)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for _, key := range sortedKeys(k) {
		if _, ok := c[key]; !ok {
			diffs = append(diffs, key+": rendered by kustomize only")
		} else if d := cmp.Diff(k[key], c[key]); d != "" {
			diffs = append(diffs, key+" (-kustomize +chart):\n"+d)
		}
	}
	for _, key := range sortedKeys(c) {
		if _, ok := k[key]; !ok {
			diffs = append(diffs, key+": rendered by the chart only")
		}
	}
	return diffs, nil
}

func sortedKeys(m map[string]map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
