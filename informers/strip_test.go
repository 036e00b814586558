package informers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestStripUnused(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "default",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
		Annotations: map[string]string{
			corev1.LastAppliedConfigAnnotation: `{"kind":"Service"}`,
			AnnotationScheduler:                "lc",
		},
	}}
	out, err := StripUnused(svc)
	if err != nil || out != svc {
		t.Fatalf("StripUnused = %v, %v", out, err)
	}
	if svc.ManagedFields != nil {
		t.Errorf("managedFields kept: %v", svc.ManagedFields)
	}
	if _, ok := svc.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Error("last-applied-configuration kept")
	}
	if svc.Annotations[AnnotationScheduler] != "lc" {
		t.Errorf("an annotation the proxy reads was dropped: %v", svc.Annotations)
	}
	// A tombstone and a non-object pass through.
	tomb := cache.DeletedFinalStateUnknown{Key: "default/web", Obj: svc}
	if out, err := StripUnused(tomb); err != nil || out != tomb {
		t.Errorf("tombstone: %v %v", out, err)
	}
	if out, err := StripUnused("x"); err != nil || out != "x" {
		t.Errorf("non-object: %v %v", out, err)
	}
}
