package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// root is the repository root, from this package's directory.
const root = "../.."

// semver is what the VERSION file holds: MAJOR.MINOR.PATCH, no "v".
var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

func readVersionFile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !semver.MatchString(v) {
		t.Fatalf("VERSION %q is not MAJOR.MINOR.PATCH", v)
	}
	return v
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestVersionsAgree checks that every place an operator reads the release
// says the VERSION file's: the chart's version (SemVer) and appVersion
// (the tag, v + VERSION), the kustomize base's image tag, the CHANGELOG's
// entry, and the Makefile's ldflags, which stamp `ipvs-proxy version` and
// tag the image (mk/release.mk, mk/image.mk use the same VERSION).
func TestVersionsAgree(t *testing.T) {
	v := readVersionFile(t)
	tag := "v" + v

	var chart struct{ Version, AppVersion string }
	readYAML(t, "charts/ipvs-proxy/Chart.yaml", &chart)
	if chart.Version != v || chart.AppVersion != tag {
		t.Errorf("charts/ipvs-proxy/Chart.yaml: version %q appVersion %q, want %q and %q", chart.Version, chart.AppVersion, v, tag)
	}

	var kustomization struct {
		Images []struct{ Name, NewTag string }
	}
	readYAML(t, "deploy/base/kustomization.yaml", &kustomization)
	if len(kustomization.Images) != 1 || kustomization.Images[0].NewTag != tag {
		t.Errorf("deploy/base/kustomization.yaml: images %+v, want one with newTag %q", kustomization.Images, tag)
	}

	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changelog), "\n## ["+v+"]") {
		t.Errorf("CHANGELOG.md has no entry \"## [%s]\"", v)
	}

	// make -n prints the build's command line without running it.
	cmd := exec.Command("make", "--no-print-directory", "-n", "build")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=") // an empty override must not win
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	if want := "internal/version.Version=" + tag + "'"; !strings.Contains(string(out), want) {
		t.Errorf("make build does not stamp %s:\n%s", want, out)
	}
}
