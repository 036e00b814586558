package churn

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// churnNode is the Node the soak's churner creates and deletes; its
// address, 198.51.100.3, is among the hostile externalIPs the churner
// writes: protected while n3 exists, an ordinary externalIP while not.
const churnNode = "n3"

// ChurnSoak is one change of the daemon soak: most are churnOnce's
// (endpoints, port, externalIPs with node addresses, affinity); one in ten
// deletes a churned Service with its slice and creates it again (a new
// ClusterIP), one in twenty creates or deletes Node n3.
func (c *Cluster) ChurnSoak(eps int) error {
	switch r := c.Rng.IntN(20); {
	case r == 0:
		return c.toggleNode()
	case r <= 2:
		return c.recreate(eps)
	}
	return c.ChurnOnce()
}

func (c *Cluster) recreate(eps int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.Rng.IntN(c.n)
	name := churnedName(i)
	err := c.Client.CoreV1().Services(ns).Delete(c.ctx(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s: %w", name, err)
	}
	err = c.Client.DiscoveryV1().EndpointSlices(ns).Delete(c.ctx(), name+"-1", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete endpointslice %s-1: %w", name, err)
	}
	return c.createChurned(i, eps)
}

func (c *Cluster) toggleNode() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := c.Client.CoreV1().Nodes()
	err := nodes.Delete(c.ctx(), churnNode, metav1.DeleteOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	created, err := nodes.Create(c.ctx(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: churnNode}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", churnNode, err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.3"}}
	_, err = nodes.UpdateStatus(c.ctx(), created, metav1.UpdateOptions{})
	return err
}
