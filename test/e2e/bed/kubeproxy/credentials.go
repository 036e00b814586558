package kubeproxy

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Identity of kube-proxy as kubeadm sets it up: the ServiceAccount
// kube-system/kube-proxy, bound to the ClusterRole system:node-proxier.
const (
	ServiceAccountNamespace = "kube-system"
	ServiceAccountName      = "kube-proxy"
)

// Grant binds ServiceAccountNamespace/ServiceAccountName to the ClusterRole
// system:node-proxier with kubeadm's ClusterRoleBinding
// kubeadm:node-proxier (`kubectl create clusterrolebinding
// kubeadm:node-proxier --clusterrole system:node-proxier
// --serviceaccount kube-system:kube-proxy`); an existing binding is kept.
// The ServiceAccount and its token come from the API server's
// ServiceAccountConfig.
func Grant(ctx context.Context, admin kubernetes.Interface) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-proxier"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind,
			Namespace: ServiceAccountNamespace, Name: ServiceAccountName}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bind kube-proxy to system:node-proxier: %w", err)
	}
	return nil
}
