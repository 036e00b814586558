package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

// KubeadmEndpoint is the control-plane endpoint written in the kubeadm test
// data (testdata/kubeadm-v1.34-kube-proxy.yaml); KubeadmObjects replaces it.
const KubeadmEndpoint = "https://control-plane.kubeadm.invalid:6443"

// kubeadmFile is kube-proxy's objects as kubeadm v1.34 creates them.
const kubeadmFile = "kubeadm-v1.34-kube-proxy.yaml"

// KubeadmObjects returns the objects kubeadm v1.34's kube-proxy addon
// creates (ServiceAccount kube-system/kube-proxy, ClusterRoleBinding
// kubeadm:node-proxier, the ConfigMap's Role and RoleBinding, ConfigMap
// kube-proxy with config.conf and kubeconfig.conf, DaemonSet kube-proxy),
// with endpoint as the control-plane endpoint in kubeconfig.conf.
func KubeadmObjects(endpoint string) ([]*unstructured.Unstructured, error) {
	raw, err := TestData(kubeadmFile)
	if err != nil {
		return nil, fmt.Errorf("kubeadm objects: %w", err)
	}
	objs, err := Decode([]byte(strings.ReplaceAll(string(raw), KubeadmEndpoint, endpoint)))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBuild, kubeadmFile, err)
	}
	return objs, nil
}

// TestData returns the file name of this package's testdata directory:
// kube-proxy's objects as a distribution creates them
// (kubeadm-v1.34-kube-proxy.yaml, eks-v1.34-kube-proxy.yaml).
func TestData(name string) ([]byte, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("%w: cannot locate the source of package deploy", ErrBuild)
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "testdata", name))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBuild, err)
	}
	return raw, nil
}

// InstallKubeadm creates kubeadm's kube-proxy objects on srv (see
// KubeadmObjects), and the kube-root-ca.crt ConfigMap in kube-system that
// kube-controller-manager's root-CA publisher would create (there is no
// controller-manager here): the pods' ServiceAccount token volume reads
// ca.crt from it.
func InstallKubeadm(ctx context.Context, srv *apiserver.Server, endpoint string) error {
	objs, err := KubeadmObjects(endpoint)
	if err != nil {
		return err
	}
	a, err := NewApplier(srv.Config())
	if err != nil {
		return err
	}
	if _, err := a.Apply(ctx, objs, false); err != nil {
		return err
	}
	return PublishRootCA(ctx, srv, metav1.NamespaceSystem)
}

// PublishRootCA creates the ConfigMap kube-root-ca.crt in namespace, as
// kube-controller-manager's root-CA publisher does in every namespace (there
// is no controller-manager here): a pod's ServiceAccount token volume reads
// its ca.crt.
func PublishRootCA(ctx context.Context, srv *apiserver.Server, namespace string) error {
	c, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(srv.CAData)},
	}
	if _, err := c.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w of ConfigMap %s/kube-root-ca.crt: %w", ErrApply, namespace, err)
	}
	return nil
}

// AdmittedPod creates, with dry-run, the Pod the DaemonSet controller would
// create for ds on nodeName (there is no controller-manager here) and
// returns it as the API server admitted it: defaulted, with its priority
// resolved and the ServiceAccount token volume mounted.
func AdmittedPod(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet, nodeName string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ds.Namespace,
			Name:      ds.Name + "-" + nodeName,
			Labels:    ds.Spec.Template.Labels,
		},
		Spec: *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = nodeName
	got, err := c.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, fmt.Errorf("the DaemonSet %s/%s's pod is refused: %w", ds.Namespace, ds.Name, err)
	}
	return got, nil
}
