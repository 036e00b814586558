package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// ErrUnresolved is wrapped by ResolvePod's errors: the pod uses something a
// node could not give it (a missing ConfigMap, a volume or env source the
// resolver does not know).
var ErrUnresolved = errors.New("pod does not resolve")

// Container is one container of a Pod as the kubelet starts it on a node:
// the command line with $(VAR) references expanded, the environment, and
// every volume mount as a bind mount of a path on the node.
type Container struct {
	Name string
	// Argv is the container's command and args, expanded. Empty means the
	// image's entrypoint and cmd.
	Argv []string
	// Env is the container's environment as NAME=VALUE, in the order the
	// kubelet sets it: the `kubernetes` Service's variables, then env and
	// envFrom. The image's own (PATH) come first and are the runner's.
	Env []string
	// Mounts in the pod spec's order.
	Mounts []Mount
}

// Mount is one bind mount into a container's root file system.
type Mount struct {
	// Source is a path on the node: a hostPath volume's path (HostPath), or
	// the directory ResolvePod wrote a ConfigMap's or a projected volume's
	// files into.
	Source string
	// Target is the mountPath in the container.
	Target   string
	ReadOnly bool
	HostPath bool
	// HostPathType is the hostPath volume's type (DirectoryOrCreate,
	// FileOrCreate, or empty: the path must exist).
	HostPathType corev1.HostPathType
}

// PodRun is a pod resolved for one node: its init containers in order, then
// its containers.
type PodRun struct {
	Node           string
	InitContainers []Container
	Containers     []Container
}

// ResolvePod resolves pod, as the API server admitted it (with the
// ServiceAccount token volume the admission plugin adds), for nodeName, as
// the kubelet would before starting its containers: ConfigMap and projected
// volumes are read from the API (with c's credentials, as the kubelet reads
// them with its node's) and written under dir, a serviceAccountToken source
// is a fresh TokenRequest for the pod's ServiceAccount, fieldRef env
// variables get the node's name and the pod's namespace.
func ResolvePod(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, nodeName, dir string) (*PodRun, error) {
	vols := map[string]Mount{}
	for _, v := range pod.Spec.Volumes {
		m, err := resolveVolume(ctx, c, pod, v, filepath.Join(dir, "volumes", v.Name))
		if err != nil {
			return nil, fmt.Errorf("%w: volume %s: %w", ErrUnresolved, v.Name, err)
		}
		vols[v.Name] = m
	}
	svcEnv, err := serviceEnv(ctx, c)
	if err != nil {
		return nil, err
	}
	run := &PodRun{Node: nodeName}
	for i, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, ctr := range list {
			rc, err := resolveContainer(ctx, c, pod, ctr, nodeName, vols, svcEnv)
			if err != nil {
				return nil, fmt.Errorf("%w: container %s: %w", ErrUnresolved, ctr.Name, err)
			}
			if i == 0 {
				run.InitContainers = append(run.InitContainers, rc)
			} else {
				run.Containers = append(run.Containers, rc)
			}
		}
	}
	return run, nil
}

// serviceEnv is what the kubelet gives every container, hostNetwork or not:
// the `kubernetes` Service's address. A proxy that fell back to the
// in-cluster configuration would dial this ClusterIP, which nothing serves
// on a node whose proxy has not synced yet.
func serviceEnv(ctx context.Context, c kubernetes.Interface) ([]string, error) {
	svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: the kubernetes Service: %w", ErrUnresolved, err)
	}
	port := strconv.Itoa(int(svc.Spec.Ports[0].Port))
	return []string{"KUBERNETES_SERVICE_HOST=" + svc.Spec.ClusterIP, "KUBERNETES_SERVICE_PORT=" + port}, nil
}

func resolveContainer(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ctr corev1.Container, nodeName string, vols map[string]Mount, svcEnv []string) (Container, error) {
	rc := Container{Name: ctr.Name, Env: append([]string(nil), svcEnv...)}
	vars := map[string]string{}
	set := func(k, v string) {
		vars[k] = v
		rc.Env = append(rc.Env, k+"="+v)
	}
	for _, ef := range ctr.EnvFrom {
		if ef.ConfigMapRef == nil {
			return rc, fmt.Errorf("envFrom other than a ConfigMap")
		}
		cm, err := c.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional {
			continue
		}
		if err != nil {
			return rc, fmt.Errorf("envFrom ConfigMap %s: %w", ef.ConfigMapRef.Name, err)
		}
		for k, v := range cm.Data {
			set(ef.Prefix+k, v)
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expansion.Expand(e.Value, expansion.MappingFuncFor(vars)))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath, nodeName)
			if err != nil {
				return rc, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		default:
			return rc, fmt.Errorf("env %s: only value and fieldRef are resolved", e.Name)
		}
	}
	for _, a := range append(append([]string(nil), ctr.Command...), ctr.Args...) {
		rc.Argv = append(rc.Argv, expansion.Expand(a, expansion.MappingFuncFor(vars)))
	}
	for _, vm := range ctr.VolumeMounts {
		m, ok := vols[vm.Name]
		if !ok {
			return rc, fmt.Errorf("volumeMount %s: no such volume", vm.Name)
		}
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return rc, fmt.Errorf("volumeMount %s: subPath is not resolved", vm.Name)
		}
		m.Target, m.ReadOnly = vm.MountPath, vm.ReadOnly
		rc.Mounts = append(rc.Mounts, m)
	}
	return rc, nil
}

// fieldValue is a downward-API field of pod on nodeName.
func fieldValue(pod *corev1.Pod, path, nodeName string) (string, error) {
	switch path {
	case "spec.nodeName":
		return nodeName, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.name":
		return pod.Name, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	}
	return "", fmt.Errorf("field %s is not resolved", path)
}

func resolveVolume(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, v corev1.Volume, dir string) (Mount, error) {
	switch {
	case v.HostPath != nil:
		m := Mount{Source: v.HostPath.Path, HostPath: true}
		if v.HostPath.Type != nil {
			m.HostPathType = *v.HostPath.Type
		}
		return m, nil
	case v.ConfigMap != nil:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Mount{}, err
		}
		return Mount{Source: dir}, writeConfigMap(ctx, c, pod.Namespace, *v.ConfigMap, dir)
	case v.Projected != nil:
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Mount{}, err
		}
		for _, s := range v.Projected.Sources {
			var err error
			switch {
			case s.ServiceAccountToken != nil:
				err = writeToken(ctx, c, pod, *s.ServiceAccountToken, dir)
			case s.ConfigMap != nil:
				err = writeConfigMap(ctx, c, pod.Namespace, corev1.ConfigMapVolumeSource{
					LocalObjectReference: s.ConfigMap.LocalObjectReference, Items: s.ConfigMap.Items, Optional: s.ConfigMap.Optional,
				}, dir)
			case s.DownwardAPI != nil:
				for _, it := range s.DownwardAPI.Items {
					if it.FieldRef == nil {
						return Mount{}, fmt.Errorf("downwardAPI %s: only fieldRef is resolved", it.Path)
					}
					val, ferr := fieldValue(pod, it.FieldRef.FieldPath, pod.Spec.NodeName)
					if ferr != nil {
						return Mount{}, ferr
					}
					err = writeFile(dir, it.Path, val)
				}
			default:
				err = fmt.Errorf("a projected source other than serviceAccountToken, configMap, downwardAPI")
			}
			if err != nil {
				return Mount{}, err
			}
		}
		return Mount{Source: dir}, nil
	}
	return Mount{}, fmt.Errorf("only hostPath, configMap and projected volumes are resolved")
}

func writeConfigMap(ctx context.Context, c kubernetes.Interface, ns string, src corev1.ConfigMapVolumeSource, dir string) error {
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, src.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && src.Optional != nil && *src.Optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", ns, src.Name, err)
	}
	if len(src.Items) == 0 {
		for k, v := range cm.Data {
			if err := writeFile(dir, k, v); err != nil {
				return err
			}
		}
		return nil
	}
	for _, it := range src.Items {
		v, ok := cm.Data[it.Key]
		if !ok {
			return fmt.Errorf("ConfigMap %s/%s has no key %s", ns, src.Name, it.Key)
		}
		if err := writeFile(dir, it.Path, v); err != nil {
			return err
		}
	}
	return nil
}

func writeToken(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, src corev1.ServiceAccountTokenProjection, dir string) error {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: src.ExpirationSeconds}}
	if src.Audience != "" {
		tr.Spec.Audiences = []string{src.Audience}
	}
	tr, err := c.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, tr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for ServiceAccount %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err)
	}
	return writeFile(dir, src.Path, tr.Status.Token)
}

func writeFile(dir, name, content string) error {
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}
