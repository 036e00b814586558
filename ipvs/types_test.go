package ipvs

import (
	"testing"
	"unsafe"
)

// TestRealServerSize: a RealServer is 32 B. The plan and the reconciler's
// mirror each hold one per real server (200,000 of each at 20,000
// Services × 10 endpoints), so every byte of it counts twice per real
// server in the live heap (BenchmarkMemoryBreakdown).
func TestRealServerSize(t *testing.T) {
	if n := unsafe.Sizeof(RealServer{}); n > 32 {
		t.Errorf("RealServer is %d B, want at most 32", n)
	}
}
