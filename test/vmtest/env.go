package vmtest

import (
	"os"
	"strings"
	"testing"
)

// GuestEnv is the environment variable key, which a host test passes to
// the guest half it runs in the VM. Run outside the VM, the guest test
// fails naming the host test to run instead: TestXGuest runs in the VM
// under TestX.
func GuestEnv(t testing.TB, key string) string {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		guest, _, _ := strings.Cut(t.Name(), "/")
		t.Fatalf("%s is not set: %s runs in the VM under %s (see the package doc)", key, guest, strings.TrimSuffix(guest, "Guest"))
	}
	return v
}
