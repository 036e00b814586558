package chart

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

// ErrHelm is wrapped by errors of Helm's methods.
var ErrHelm = errors.New("helm")

// Helm runs one helm binary against the repository's chart.
type Helm struct {
	Bin   string
	Chart string
}

// FromEnv returns the Helm of $IPVS_PROXY_HELM, or ok false when it is
// not set.
func FromEnv() (h Helm, ok bool, err error) {
	bin := os.Getenv("IPVS_PROXY_HELM")
	if bin == "" {
		return Helm{}, false, nil
	}
	_, file, _, found := runtime.Caller(0)
	if !found {
		return Helm{}, false, fmt.Errorf("%w: cannot locate the source of package chart", ErrHelm)
	}
	chart := filepath.Join(filepath.Dir(file), "..", "..", "..", "charts", "ipvs-proxy")
	if _, err := os.Stat(filepath.Join(chart, "Chart.yaml")); err != nil {
		return Helm{}, false, fmt.Errorf("%w: chart: %w", ErrHelm, err)
	}
	return Helm{Bin: bin, Chart: chart}, true, nil
}

// Values are --set-string flags (key=value) of one rendering.
type Values map[string]string

func (v Values) args() []string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var args []string
	for _, k := range keys {
		args = append(args, "--set", k+"="+v[k])
	}
	return args
}

func (h Helm) run(args ...string) ([]byte, error) {
	cmd := exec.Command(h.Bin, args...)
	// No user configuration, cache or repositories: only the chart.
	home, err := os.MkdirTemp("", "ipvs-proxy-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w %v: %w: %s%s", ErrHelm, args, err, stderr.Bytes(), out)
	}
	return out, nil
}

// Template renders the chart as release "ipvs-proxy" in namespace, as
// `helm template` does.
func (h Helm) Template(namespace string, values Values) ([]*unstructured.Unstructured, error) {
	out, err := h.run(append([]string{"template", "ipvs-proxy", h.Chart, "--namespace", namespace}, values.args()...)...)
	if err != nil {
		return nil, err
	}
	objs, err := deploy.Decode(out)
	if err != nil {
		return nil, fmt.Errorf("%w: decode: %w", ErrHelm, err)
	}
	return objs, nil
}

// Lint runs `helm lint --strict` with values in namespace.
func (h Helm) Lint(namespace string, values Values) ([]byte, error) {
	return h.run(append([]string{"lint", "--strict", h.Chart, "--namespace", namespace}, values.args()...)...)
}
