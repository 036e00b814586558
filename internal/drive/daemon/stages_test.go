package daemon

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
)

func TestStagesWaited(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	a, b := types.NamespacedName{Namespace: "n", Name: "a"}, types.NamespacedName{Namespace: "n", Name: "b"}
	for _, tc := range []struct {
		name              string
		c                 informers.Changes
		delivered, waited time.Duration
	}{
		{"oldest trigger", informers.Changes{Seen: t0.Add(30 * time.Millisecond),
			Triggers: map[types.NamespacedName]time.Time{a: t0.Add(10 * time.Millisecond), b: t0}}, 30 * time.Millisecond, 20 * time.Millisecond},
		{"no trigger", informers.Changes{Seen: t0.Add(30 * time.Millisecond)}, 0, 20 * time.Millisecond},
		{"nothing seen (a requeue, a periodic sync)", informers.Changes{Triggers: map[types.NamespacedName]time.Time{a: t0}}, 0, 0},
		{"trigger after the handler (another clock)", informers.Changes{Seen: t0.Add(30 * time.Millisecond),
			Triggers: map[types.NamespacedName]time.Time{a: t0.Add(40 * time.Millisecond)}}, 0, 20 * time.Millisecond},
	} {
		var s Stages
		s.waited(tc.c, t0.Add(50*time.Millisecond))
		if s.Delivered != tc.delivered || s.Waited != tc.waited {
			t.Errorf("%s: delivered %v waited %v, want %v %v", tc.name, s.Delivered, s.Waited, tc.delivered, tc.waited)
		}
	}
}
