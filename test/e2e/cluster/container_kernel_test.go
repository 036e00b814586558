//go:build kernel

package cluster_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// procs are a pod's container processes in the upstream bed.
type procs struct {
	mu   sync.Mutex
	cmds []*exec.Cmd
	// stopped: a SIGTERM or SIGKILL was sent; no container starts after.
	stopped bool
	wg      sync.WaitGroup
	// exited is closed once every process has exited.
	exited chan struct{}
}

// runContainers starts the pod's containers as processes in its network
// namespace, each in a UTS namespace of its own named after the pod (the
// node for a hostNetwork pod: agnhost answers its hostname) and with the
// pod's resolv.conf when it has one (inPod), their output in
// dir/NAMESPACE_POD_CONTAINER.log (containerLogPath). Its running
// containers (sidecars first: cluster.RunningContainers) start at once;
// a pod with init containers (cluster.InitContainers) runs those first,
// one after the other, each to its exit, in the background: run.initDone
// is closed once the running containers are started, and the pod is not
// Ready before (probe). An init container that fails leaves the pod
// unready for good (kubelet would restart it; no upstream Service test
// needs that).
func (a *agent) runContainers(run *podRun, pod *corev1.Pod, hostname, dir string) (*procs, error) {
	p := &procs{exited: make(chan struct{})}
	startRunning := func() error {
		for _, c := range cluster.RunningContainers(pod) {
			if _, err := a.startContainer(p, run, pod, c, hostname, dir); err != nil {
				p.signal(syscall.SIGKILL)
				return err
			}
		}
		return nil
	}
	inits := cluster.InitContainers(pod)
	if len(inits) == 0 {
		if err := startRunning(); err != nil {
			return nil, err
		}
	} else {
		run.initDone = make(chan struct{})
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for _, c := range inits {
				done, err := a.startContainer(p, run, pod, c, hostname, dir)
				if err == nil && done != nil {
					err = <-done
				}
				if err != nil {
					a.logf("pod %s/%s init container %s: %v: its containers are not started", pod.Namespace, pod.Name, c.Name, err)
					return
				}
			}
			if err := startRunning(); err != nil {
				a.logf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
				return
			}
			close(run.initDone)
		}()
	}
	go func() { p.wg.Wait(); close(p.exited) }()
	return p, nil
}

// startContainer starts container c of pod as a process (runContainers);
// done gets its exit, nil when c runs nothing (cluster.ContainerArgv).
func (a *agent) startContainer(p *procs, run *podRun, pod *corev1.Pod, c corev1.Container, hostname, dir string) (<-chan error, error) {
	env, unknown := cluster.ContainerEnv(pod, c, run.ip, a.node.ip, a.node.name)
	if len(unknown) > 0 {
		a.logf("pod %s/%s container %s: environment the bed does not give: %s", pod.Namespace, pod.Name, c.Name, strings.Join(unknown, ", "))
	}
	argv := cluster.ContainerArgv(c, env)
	if argv == nil {
		return nil, nil
	}
	logPath := containerLogPath(dir, pod.Namespace, pod.Name, c.Name)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// unshare execs sh in a new UTS (and mount) namespace; sh sets the
	// hostname (and resolv.conf) and execs the container's program:
	// one process, SIGTERM reaches it.
	cmd := exec.Command("unshare", inPod(hostname, run.resolvConf, argv)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Under p.mu: a signal sent meanwhile reaches this process too.
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		logFile.Close()
		return nil, fmt.Errorf("container %s: not started: the pod is stopping", c.Name)
	}
	if err := run.ns.Do(cmd.Start); err != nil {
		p.mu.Unlock()
		logFile.Close()
		return nil, fmt.Errorf("container %s: start %q: %w", c.Name, argv, err)
	}
	p.cmds = append(p.cmds, cmd)
	p.wg.Add(1)
	p.mu.Unlock()
	a.logf("pod %s/%s container %s: pid %d runs %q (log %s)", pod.Namespace, pod.Name, c.Name, cmd.Process.Pid, argv, logPath)
	done := make(chan error, 1)
	go func() {
		defer p.wg.Done()
		err := cmd.Wait()
		logFile.Close()
		a.logf("pod %s/%s container %s exited: %v", pod.Namespace, pod.Name, c.Name, err)
		done <- err
	}()
	return done, nil
}

// containerLogPath is where runContainers writes a container's output.
func containerLogPath(dir, namespace, pod, container string) string {
	return filepath.Join(dir, fmt.Sprintf("%s_%s_%s.log", namespace, pod, container))
}

// signal sends sig to every process: SIGTERM starts a graceful stop.
func (p *procs) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		p.stopped = true
	}
	for _, c := range p.cmds {
		_ = c.Process.Signal(sig)
	}
}

// kill ends a stop: SIGKILL to what is left, and wait for them.
func (p *procs) kill() {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
}

// preStop runs the pod's containers' preStop hooks as kubelet does before
// it sends SIGTERM, all at once, and returns when they have ended, at the
// deadline (the end of the grace period) or when the pod is removed: an
// exec hook runs its command in the pod as Exec does (`sleep 100` holding
// a terminating pod up), a sleep hook waits. An HTTP hook is not run
// (logged): no upstream Service test uses one.
func (a *agent) preStop(ctx context.Context, run *podRun, pod *corev1.Pod, deadline time.Time) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	go func() {
		select {
		case <-run.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for _, c := range pod.Spec.Containers {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			continue
		}
		h := c.Lifecycle.PreStop
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			var err error
			switch {
			case h.Exec != nil && len(h.Exec.Command) > 0:
				err = a.Exec(ctx, pod.Namespace, pod.Name, c.Name, h.Exec.Command, nil, io.Discard, io.Discard)
			case h.Sleep != nil:
				select {
				case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
				case <-ctx.Done():
					err = ctx.Err()
				}
			default:
				a.logf("pod %s/%s container %s: preStop hook not run: the bed runs exec and sleep hooks only", pod.Namespace, pod.Name, c.Name)
				return
			}
			a.logf("pod %s/%s container %s: preStop hook ended after %v: %v", pod.Namespace, pod.Name, c.Name, time.Since(start).Round(time.Millisecond), err)
		}()
	}
	wg.Wait()
}
