package daemon

import (
	"os"
	"strings"
	"testing"
)

func TestNodeName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ override, want string }{
		{"Node-A ", "node-a"},
		{"", strings.ToLower(host)},
	} {
		got, err := NodeName(tt.override)
		if err != nil || got != tt.want {
			t.Errorf("NodeName(%q) = %q, %v; want %q", tt.override, got, err, tt.want)
		}
	}
	if _, err := NodeName("  "); err == nil {
		t.Error("a blank --hostname-override gave no error")
	}
}

func TestRESTConfig(t *testing.T) {
	dir := t.TempDir()
	kc := dir + "/kubeconfig"
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := RESTConfig("https://10.0.0.9:443", kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.0.0.9:443" || cfg.BearerToken != "t" || cfg.ContentType != "application/vnd.kubernetes.protobuf" ||
		!strings.HasPrefix(cfg.UserAgent, "ipvs-proxy/") {
		t.Errorf("config %+v", cfg)
	}
	if _, err := RESTConfig("", dir+"/missing"); err == nil {
		t.Error("a missing kubeconfig gave no error")
	}
}
