package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

// The kustomizations under deploy/, relative to Dir.
const (
	Base              = "base"
	ReplaceKubeProxy  = "overlays/replace-kube-proxy"
	MigrateNodeByNode = "overlays/migrate-node-by-node"
	// EKS is replace-kube-proxy reading the EKS add-on's ConfigMaps.
	EKS = "overlays/eks"
)

// Kustomizations are every kustomization shipped under deploy/.
var Kustomizations = []string{Base, ReplaceKubeProxy, MigrateNodeByNode}

// FieldManager is the server-side apply field manager of Apply.
const FieldManager = "ipvs-proxy-e2e"

var (
	// ErrBuild is wrapped by errors of Build.
	ErrBuild = errors.New("kustomize build")
	// ErrApply is wrapped by errors of Applier.Apply.
	ErrApply = errors.New("server-side apply")
	// ErrNoServiceAccount is returned by Install when the manifests have no
	// DaemonSet naming a ServiceAccount.
	ErrNoServiceAccount = errors.New("no DaemonSet with a serviceAccountName")
)

// Dir returns the absolute path of the repository's deploy/ directory,
// found from this source file (test/e2e/bed/deploy), so it works from any test
// package's working directory.
func Dir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("%w: cannot locate the source of package deploy", ErrBuild)
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "deploy")
	if _, err := os.Stat(filepath.Join(dir, Base, "kustomization.yaml")); err != nil {
		return "", fmt.Errorf("%w: deploy directory: %w", ErrBuild, err)
	}
	return dir, nil
}

// Build renders the kustomization at path (relative to Dir, or absolute),
// like `kubectl kustomize`, with kustomize's legacy output order (Namespaces
// and RBAC first, workloads last), which is also a valid apply order.
func Build(path string) ([]*unstructured.Unstructured, error) {
	if !filepath.IsAbs(path) {
		dir, err := Dir()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(dir, path)
	}
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBuild, path, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBuild, path, err)
	}
	objs, err := Decode(out)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBuild, path, err)
	}
	return objs, nil
}

// Decode splits multi-document YAML (kustomize's, helm's output) into objects.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// Applier applies objects with server-side apply (Patch with
// application/apply-patch+yaml), force-owning conflicts and with strict
// field validation, so an unknown or duplicated field is an error rather
// than a warning. It records every warning the server sends.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	warn   *warnings
}

// NewApplier returns an Applier with cfg's credentials.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	cfg = rest.CopyConfig(cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: discovery client: %w", ErrApply, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: dynamic client: %w", ErrApply, err)
	}
	return &Applier{
		dyn:    dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		warn:   w,
	}, nil
}

// Apply applies objs in order, as `kubectl apply --server-side
// --force-conflicts [--dry-run=server]` does, and returns what the server
// answered for each (defaulted, and admitted by every admission plugin).
// With dryRun, nothing is stored; note that namespaced objects still need
// their Namespace to exist.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured, dryRun bool) ([]*unstructured.Unstructured, error) {
	opts := metav1.PatchOptions{
		FieldManager:    FieldManager,
		Force:           ptr.To(true),
		FieldValidation: metav1.FieldValidationStrict,
	}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var out []*unstructured.Unstructured
	for _, obj := range objs {
		got, err := a.apply(ctx, obj, opts)
		if err != nil {
			return out, fmt.Errorf("%w of %s %s: %w", ErrApply, obj.GetKind(), objectName(obj), err)
		}
		out = append(out, got)
	}
	return out, nil
}

func (a *Applier) apply(ctx context.Context, obj *unstructured.Unstructured, opts metav1.PatchOptions) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset() // a type registered after the first discovery
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		ri = a.dyn.Resource(mapping.Resource).Namespace(ns)
	}
	return ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
}

// Warnings returns the warnings the server sent since the last call, and
// forgets them.
func (a *Applier) Warnings() []string { return a.warn.take() }

// warnings is a rest.WarningHandler that keeps every warning.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// Installed is a kustomization applied for real to a test server.
type Installed struct {
	// Objects are what the server stored, in apply order.
	Objects []*unstructured.Unstructured
	// ServiceAccount is the DaemonSet's ServiceAccount.
	ServiceAccount types.NamespacedName
	// Config authenticates as ServiceAccount with a bound token; RBAC
	// grants it exactly what the manifests bind to it.
	Config *rest.Config
}

// Install builds the kustomization at path (see Build), applies it for real
// to srv as the admin, and returns the credentials of the ServiceAccount
// the DaemonSet runs as, once RBAC lets that ServiceAccount list Services
// (the authorizer learns of new bindings through an informer). There is no
// controller-manager, so the DaemonSet never gets pods; run the proxy
// yourself with Config, for example through srv.WriteKubeconfig.
func Install(ctx context.Context, srv *apiserver.Server, path string) (*Installed, error) {
	objs, err := Build(path)
	if err != nil {
		return nil, err
	}
	sa, err := daemonSetServiceAccount(objs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a, err := NewApplier(srv.Config())
	if err != nil {
		return nil, err
	}
	stored, err := a.Apply(ctx, objs, false)
	if err != nil {
		return nil, err
	}
	cfg, err := srv.ServiceAccountConfig(ctx, sa.Namespace, sa.Name)
	if err != nil {
		return nil, err
	}
	if err := waitForRBAC(ctx, cfg); err != nil {
		return nil, fmt.Errorf("ServiceAccount %s: %w", sa, err)
	}
	return &Installed{Objects: stored, ServiceAccount: sa, Config: cfg}, nil
}

// daemonSetServiceAccount finds the one DaemonSet and its ServiceAccount.
func daemonSetServiceAccount(objs []*unstructured.Unstructured) (types.NamespacedName, error) {
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		name, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "serviceAccountName")
		if name == "" {
			break
		}
		return types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, nil
	}
	return types.NamespacedName{}, ErrNoServiceAccount
}

// waitForRBAC polls until cfg may list Services cluster-wide.
func waitForRBAC(ctx context.Context, cfg *rest.Config) error {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, last = c.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsForbidden(last) {
			return false, nil
		}
		return last == nil, last
	})
	if err != nil {
		return fmt.Errorf("RBAC never allowed listing services: %w (last: %v)", err, last)
	}
	return nil
}

func objectName(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return ns + "/" + o.GetName()
	}
	return o.GetName()
}
