//go:build kernel

package node_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// traffic is a client on the node sending one HTTP request at a time, each
// on a new connection, to each target in turn, counting the answers of each
// phase (kube-proxy serving, the replace step, the rollout) by target.
type traffic struct {
	targets []string
	mu      sync.Mutex
	phase   string
	phases  []string
	counts  map[string]*tally // phase + " " + target
	stop    chan struct{}
	done    chan struct{}
}

// tally is one phase's requests to one target.
type tally struct {
	ok, failed int
	firstErr   error
}

// startTraffic starts the client in phase, pausing interval between
// requests.
func startTraffic(phase string, interval time.Duration, targets ...string) *traffic {
	tr := &traffic{targets: targets, counts: map[string]*tally{}, stop: make(chan struct{}), done: make(chan struct{})}
	tr.setPhase(phase)
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(tr.done)
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			case <-time.After(interval):
			}
			target := targets[i%len(targets)]
			err := get(client, "http://"+target+"/hostname")
			tr.mu.Lock()
			c := tr.counts[tr.phase+" "+target]
			if err != nil {
				c.failed++
				if c.firstErr == nil {
					c.firstErr = fmt.Errorf("%s: %w", time.Now().Format(time.TimeOnly), err)
				}
			} else {
				c.ok++
			}
			tr.mu.Unlock()
		}
	}()
	return tr
}

// get is one request, its body read whole; any status but 200 fails it.
func get(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// setPhase counts the following requests under phase.
func (tr *traffic) setPhase(phase string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.phase = phase
	tr.phases = append(tr.phases, phase)
	for _, target := range tr.targets {
		tr.counts[phase+" "+target] = &tally{}
	}
}

// finish stops the client, logs each phase's counts and fails t for every
// phase with a failed request; it does nothing when called again.
func (tr *traffic) finish(t *testing.T) {
	t.Helper()
	select {
	case <-tr.stop:
		return
	default:
	}
	close(tr.stop)
	<-tr.done
	var b strings.Builder
	for _, phase := range tr.phases {
		for _, target := range tr.targets {
			c := tr.counts[phase+" "+target]
			fmt.Fprintf(&b, "\n  %-10s %-21s %5d ok %3d failed", phase, target, c.ok, c.failed)
			if c.failed > 0 {
				t.Errorf("%s: %d of %d requests to %s failed, the first: %v", phase, c.failed, c.ok+c.failed, target, c.firstErr)
			}
			if c.ok+c.failed == 0 {
				t.Errorf("%s: no request to %s", phase, target)
			}
		}
	}
	t.Logf("requests by phase and target:%s", b.String())
}
