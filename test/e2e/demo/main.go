// Command demo is `make demo`: the whole proxy on a real kernel against a
// real API server, in a few minutes, from a fresh machine.
//
// On the host it starts the in-process kube-apiserver (test/e2e/apiserver),
// creates the ServiceAccount ipvs-proxy/ipvs-proxy bound to the ClusterRole
// of deploy/base/rbac.yaml, and writes two kubeconfig files: the proxy's
// (that ServiceAccount's token, for the relay inside node-a) and the admin's
// (for the guest to write the scenarios). It then boots the test VM
// (test/vmtest) with the API server's port forwarded and runs the guest
// program (test/e2e/demo/guest), which builds node-a, applies the seed
// articles' scenarios, runs `ipvs-proxy run` and `ipvs-proxy recover`, and
// prints what an operator looks at. The guest's console is streamed as it
// goes.
//
// It exits 0 only when every step in the guest passed; it removes the API
// server's data and its own temporary files, and the VM leaves nothing
// behind. It touches nothing outside loopback, the VM and its temporary
// directory.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// The ServiceAccount the proxy runs as, as deploy/base names it.
const (
	saNamespace = "ipvs-proxy"
	saName      = "ipvs-proxy"
)

func main() {
	var (
		proxyBin = flag.String("proxy", "bin/ipvs-proxy", "the ipvs-proxy binary (make build)")
		guestBin = flag.String("guest", "bin/demo-guest", "the guest program (go build ./demo/guest in test/e2e)")
		rbac     = flag.String("rbac", "deploy/base/rbac.yaml", "the ClusterRole and binding the proxy runs under")
		timeout  = flag.Duration("timeout", 12*time.Minute, "bound for the whole demo")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	err := run(ctx, *proxyBin, *guestBin, *rbac)
	fmt.Printf("\n[demo] total %.0fs\n", time.Since(start).Seconds())
	if err != nil {
		fmt.Fprintf(os.Stderr, "[demo] FAIL: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("[demo] PASS: every scenario worked")
}

func progress(format string, args ...any) {
	fmt.Printf("[demo] "+format+"\n", args...)
}

func run(ctx context.Context, proxyBin, guestBin, rbacPath string) error {
	for _, p := range []*string{&proxyBin, &guestBin, &rbacPath} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("%w (run `make demo`, which builds it)", err)
		}
		*p = abs
	}
	if _, err := vmtest.FindKernelRoot(); err != nil {
		return fmt.Errorf("%w (scripts/install-deps.sh unpacks it; `make demo` runs it)", err)
	}

	progress("starting kube-apiserver and etcd in-process on 127.0.0.1")
	t0 := time.Now()
	srv, err := apiserver.New(apiserver.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	progress("API server up at %s in %.1fs; the VM reaches it at %s", srv.URL, time.Since(t0).Seconds(), srv.GuestURL())

	admin, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		return err
	}
	if err := applyRBAC(ctx, admin, rbacPath); err != nil {
		return err
	}
	saCfg, err := srv.ServiceAccountConfig(ctx, saNamespace, saName)
	if err != nil {
		return err
	}
	progress("ServiceAccount %s/%s bound to ClusterRole ipvs-proxy from %s", saNamespace, saName, rbacPath)

	dir, err := os.MkdirTemp("", "ipvs-proxy-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	proxyKubeconfig := filepath.Join(dir, "proxy.kubeconfig")
	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	// The proxy runs in node-a, which reaches the API server through a relay
	// on its own loopback; the certificate is valid for 127.0.0.1.
	if err := srv.WriteKubeconfig(proxyKubeconfig, saCfg, "https://127.0.0.1:6443"); err != nil {
		return err
	}
	if err := srv.WriteKubeconfig(adminKubeconfig, srv.Config(), srv.GuestURL()); err != nil {
		return err
	}

	progress("booting the VM (Debian kernel under qemu TCG) with port %d forwarded; the guest takes it from here", srv.Port)
	res, err := vmtest.Run(ctx, vmtest.Config{
		Jobs: []vmtest.Job{{
			Bin: guestBin,
			Args: []string{
				"-proxy", proxyBin,
				"-proxy-kubeconfig", proxyKubeconfig,
				"-admin-kubeconfig", adminKubeconfig,
			},
			Dir: dir,
		}},
		ForwardPort: srv.Port,
		Output:      os.Stdout,
		Timeout:     10 * time.Minute,
	})
	if res != nil {
		progress("VM: boot %.1fs, total %.1fs", res.Boot.Seconds(), res.Total.Seconds())
	}
	if err != nil {
		return err
	}
	return checkFromHost(ctx, admin)
}

// applyRBAC creates the ClusterRole, ClusterRoleBinding, Role and
// RoleBinding (the events Lease's, in the proxy's namespace) of the
// deploy/base manifest, as `kubectl apply` would.
func applyRBAC(ctx context.Context, c kubernetes.Interface, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		js, err := json.Marshal(raw)
		if err != nil {
			return err
		}
		switch raw["kind"] {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := json.Unmarshal(js, &r); err != nil {
				return err
			}
			if _, err := c.RbacV1().ClusterRoles().Create(ctx, &r, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ClusterRole %s: %w", r.Name, err)
			}
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := json.Unmarshal(js, &b); err != nil {
				return err
			}
			if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &b, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ClusterRoleBinding %s: %w", b.Name, err)
			}
		case "Role":
			var r rbacv1.Role
			if err := json.Unmarshal(js, &r); err != nil {
				return err
			}
			if err := ensureNamespace(ctx, c, r.Namespace); err != nil {
				return err
			}
			if _, err := c.RbacV1().Roles(r.Namespace).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create Role %s/%s: %w", r.Namespace, r.Name, err)
			}
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := json.Unmarshal(js, &b); err != nil {
				return err
			}
			if err := ensureNamespace(ctx, c, b.Namespace); err != nil {
				return err
			}
			if _, err := c.RbacV1().RoleBindings(b.Namespace).Create(ctx, &b, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create RoleBinding %s/%s: %w", b.Namespace, b.Name, err)
			}
		case nil:
		default:
			return fmt.Errorf("%s: unexpected kind %v", path, raw["kind"])
		}
	}
}

// ensureNamespace creates the namespace ns unless it exists.
func ensureNamespace(ctx context.Context, c kubernetes.Interface, ns string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// checkFromHost confirms from the host what the guest reported: the
// refusal Events exist in the API server, written by the proxy on node-a.
func checkFromHost(ctx context.Context, c kubernetes.Interface) error {
	evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "source=ipvs-proxy"})
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	var found []string
	seen := map[string]int{}
	for _, e := range evs.Items {
		found = append(found, fmt.Sprintf("%s %s %s/%s (host %s)", e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Source.Host))
		seen[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+" "+e.Reason+": "+e.Message]++
	}
	if len(found) == 0 {
		return errors.New("the API server holds no Event from ipvs-proxy")
	}
	progress("the API server holds %d Event(s) from ipvs-proxy: %s", len(found), strings.Join(found, "; "))
	// One Event per refusal, across the proxy's restart too: the restarted
	// process reads what the first reported from --state-dir.
	for what, n := range seen {
		if n > 1 {
			return fmt.Errorf("%d Events for one refusal (%s): the restarted proxy reported it again", n, what)
		}
	}
	return nil
}
