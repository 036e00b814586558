package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// ContainerLogs opens the output of a container of a pod the node runs
// (kubelet's /containerLogs, what `kubectl logs` reads): ErrNoPod for a
// pod or container it never ran.
type ContainerLogs interface {
	ContainerLog(namespace, pod, container string) (io.ReadCloser, error)
}

// LogPath is the pod, namespace and container a /containerLogs/ path
// names: /containerLogs/NAMESPACE/POD/CONTAINER, as kubelet routes it.
type LogPath struct {
	Namespace, Pod, Container string
}

// ParseLogPath parses a /containerLogs/ path; ok is false for any other
// shape.
func ParseLogPath(path string) (p LogPath, ok bool) {
	parts := strings.Split(strings.TrimPrefix(path, "/containerLogs/"), "/")
	if len(parts) != 3 {
		return LogPath{}, false
	}
	for _, s := range parts {
		if s == "" {
			return LogPath{}, false
		}
	}
	return LogPath{Namespace: parts[0], Pod: parts[1], Container: parts[2]}, true
}

// LogOptions are the query parameters of a /containerLogs/ request the
// bed serves: tailLines and limitBytes (kubelet's names, set by the API
// server from PodLogOptions). Follow, previous, timestamps and since are
// refused: the bed's logs are plain files of one container run.
type LogOptions struct {
	TailLines  int64 // -1: every line
	LimitBytes int64 // -1: no limit
}

// ParseLogOptions reads q; an option the bed cannot honour is an error
// naming it.
func ParseLogOptions(q map[string][]string) (LogOptions, error) {
	o := LogOptions{TailLines: -1, LimitBytes: -1}
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	for _, k := range []string{"follow", "previous", "timestamps"} {
		if v := get(k); v != "" {
			on, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("%s=%q: not a boolean", k, v)
			}
			if on {
				return o, fmt.Errorf("%s=true: the bed's node agent keeps one plain log file per container (no follow, no previous run, no timestamps)", k)
			}
		}
	}
	for _, k := range []string{"sinceSeconds", "sinceTime"} {
		if get(k) != "" {
			return o, fmt.Errorf("%s: the bed's logs have no timestamps to select by", k)
		}
	}
	for k, dst := range map[string]*int64{"tailLines": &o.TailLines, "limitBytes": &o.LimitBytes} {
		if v := get(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return o, fmt.Errorf("%s=%q: want a count of zero or more", k, v)
			}
			*dst = n
		}
	}
	return o, nil
}

// Select applies o to a log: its last TailLines lines, then at most
// LimitBytes bytes of them, as kubelet does.
func (o LogOptions) Select(log []byte) []byte {
	if o.TailLines >= 0 {
		lines := bytes.SplitAfter(log, []byte("\n"))
		if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
			lines = lines[:n-1]
		}
		if int64(len(lines)) > o.TailLines {
			lines = lines[int64(len(lines))-o.TailLines:]
		}
		log = bytes.Join(lines, nil)
	}
	if o.LimitBytes >= 0 && int64(len(log)) > o.LimitBytes {
		log = log[:o.LimitBytes]
	}
	return log
}

// serveLogs answers GET /containerLogs/NAMESPACE/POD/CONTAINER.
func (k *KubeletServer) serveLogs(w http.ResponseWriter, req *http.Request) {
	if k.rt.Logs == nil {
		k.refuse(w, req)
		return
	}
	p, ok := ParseLogPath(req.URL.Path)
	if !ok || req.Method != http.MethodGet {
		k.logf("kubelet %s: %s %s: not a logs request (want GET /containerLogs/NAMESPACE/POD/CONTAINER)", k.node, req.Method, req.URL.Path)
		http.Error(w, "want GET /containerLogs/NAMESPACE/POD/CONTAINER", http.StatusBadRequest)
		return
	}
	opts, err := ParseLogOptions(req.URL.Query())
	if err != nil {
		k.logf("kubelet %s: logs of %s/%s/%s refused: %v", k.node, p.Namespace, p.Pod, p.Container, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r, err := k.rt.Logs.ContainerLog(p.Namespace, p.Pod, p.Container)
	if err != nil {
		k.logf("kubelet %s: logs of %s/%s/%s: %v", k.node, p.Namespace, p.Pod, p.Container, err)
		code := http.StatusInternalServerError
		if errors.Is(err, ErrNoPod) {
			code = http.StatusNotFound
		}
		http.Error(w, err.Error(), code)
		return
	}
	defer r.Close()
	log, err := io.ReadAll(r)
	if err != nil {
		k.logf("kubelet %s: logs of %s/%s/%s: %v", k.node, p.Namespace, p.Pod, p.Container, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(opts.Select(log))
}
