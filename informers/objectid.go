package informers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// objectID is what a cache entry of the proxy's own type (cachedSlice,
// cachedService) keeps of its object's metadata: the namespace and name
// client-go's store keys it by and the resourceVersion the informer
// compares (an update with an unchanged one is a resync, which the
// Watcher's handlers are not sent): 48 B against ObjectMeta's 232. It is a
// metav1.Object for client-go (meta.Accessor); every other field reads as
// unset, and setting one does nothing: cache entries are read-only. The
// UID is not kept: Events name a Service by it, and cachedService keeps
// its own (GetUID); nothing reads an EndpointSlice's (its 36 characters
// were 64 B a slice).
type objectID struct {
	name, namespace string
	resourceVersion string
}

// idOf keeps m's identity, its namespace interned.
func (l *leaner) idOf(m *metav1.ObjectMeta) objectID {
	return objectID{name: m.Name, namespace: l.str(m.Namespace), resourceVersion: m.ResourceVersion}
}

// objectMeta is the ObjectMeta of id: its three fields.
func (id *objectID) objectMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: id.name, Namespace: id.namespace, ResourceVersion: id.resourceVersion}
}

var _ metav1.Object = (*objectID)(nil)

func (id *objectID) GetNamespace() string                        { return id.namespace }
func (id *objectID) SetNamespace(namespace string)               { id.namespace = namespace }
func (id *objectID) GetName() string                             { return id.name }
func (id *objectID) SetName(name string)                         { id.name = name }
func (id *objectID) GetUID() types.UID                           { return "" }
func (id *objectID) SetUID(types.UID)                            {}
func (id *objectID) GetResourceVersion() string                  { return id.resourceVersion }
func (id *objectID) SetResourceVersion(version string)           { id.resourceVersion = version }
func (id *objectID) GetGenerateName() string                     { return "" }
func (id *objectID) SetGenerateName(string)                      {}
func (id *objectID) GetGeneration() int64                        { return 0 }
func (id *objectID) SetGeneration(int64)                         {}
func (id *objectID) GetSelfLink() string                         { return "" }
func (id *objectID) SetSelfLink(string)                          {}
func (id *objectID) GetCreationTimestamp() metav1.Time           { return metav1.Time{} }
func (id *objectID) SetCreationTimestamp(metav1.Time)            {}
func (id *objectID) GetDeletionTimestamp() *metav1.Time          { return nil }
func (id *objectID) SetDeletionTimestamp(*metav1.Time)           {}
func (id *objectID) GetDeletionGracePeriodSeconds() *int64       { return nil }
func (id *objectID) SetDeletionGracePeriodSeconds(*int64)        {}
func (id *objectID) GetLabels() map[string]string                { return nil }
func (id *objectID) SetLabels(map[string]string)                 {}
func (id *objectID) GetAnnotations() map[string]string           { return nil }
func (id *objectID) SetAnnotations(map[string]string)            {}
func (id *objectID) GetFinalizers() []string                     { return nil }
func (id *objectID) SetFinalizers([]string)                      {}
func (id *objectID) GetOwnerReferences() []metav1.OwnerReference { return nil }
func (id *objectID) SetOwnerReferences([]metav1.OwnerReference)  {}
func (id *objectID) GetManagedFields() []metav1.ManagedFieldsEntry {
	return nil
}
func (id *objectID) SetManagedFields([]metav1.ManagedFieldsEntry) {}
