//go:build kernel

package daemonbench

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// proxy is the `ipvs-proxy run` process in the node namespace, with its
// JSON log read as it grows.
type proxy struct {
	*ktest.Process
	off     int64
	partial []byte
	records []map[string]any
}

func startProxy(t *testing.T, node *ktest.Node, bin, kubeconfig string) *proxy {
	t.Helper()
	return &proxy{Process: harness.StartProxy(t, node.NS, harness.Proxy{Bin: bin, Kubeconfig: kubeconfig, Node: thisNode,
		SyncPeriod: syncPeriod, MetricsAddr: metricsAddr, LogFormat: "json", Flags: []string{"--profiling"}})}
}

// scan reads the log lines written since the last call and returns their
// records (non-JSON lines are skipped).
func (p *proxy) scan() []map[string]any {
	f, err := os.Open(p.Log)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(p.off, io.SeekStart); err != nil {
		return nil
	}
	b, _ := io.ReadAll(f)
	p.off += int64(len(b))
	p.partial = append(p.partial, b...)
	var out []map[string]any
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		line := p.partial[:i]
		p.partial = p.partial[i+1:]
		var r map[string]any
		if json.Unmarshal(line, &r) == nil {
			out = append(out, r)
			p.records = append(p.records, r)
		}
	}
	return out
}

func str(r map[string]any, k string) string { s, _ := r[k].(string); return s }

func seconds(r map[string]any, k string) time.Duration {
	f, _ := r[k].(float64)
	return time.Duration(f * float64(time.Second))
}

// logTimeLayout is how zap's ISO8601 encoder writes a record's "ts".
const logTimeLayout = "2006-01-02T15:04:05.000Z0700"

// logTime is a record's "ts" (zap's ISO8601 encoder).
func logTime(r map[string]any) time.Time {
	ts, _ := time.Parse(logTimeLayout, str(r, "ts"))
	return ts
}

// waitRecord polls the log every interval until match returns true for a
// record, and returns that record and when it was seen.
func (p *proxy) waitRecord(t *testing.T, what string, timeout, interval time.Duration, match func(map[string]any) bool) (map[string]any, time.Time) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, r := range p.scan() {
			if str(r, "level") == "warn" || str(r, "level") == "error" {
				t.Logf("proxy %s: %s %v", str(r, "level"), str(r, "msg"), r)
			}
			if match(r) {
				return r, time.Now()
			}
		}
		if exited, err := p.Wait(0); exited {
			t.Fatalf("proxy exited while waiting for %s: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
