package nlconn

import (
	"context"
	"errors"
	"testing"
)

func TestRun(t *testing.T) {
	var got []int
	s := New[int](4)
	s.Updates <- 1
	s.Updates <- 2
	close(s.Updates)
	if err := s.Run(context.Background(), func(u int) { got = append(got, u) }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run of a closed subscription: %v, want ErrClosed", err)
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("updates %v, want [1 2]", got)
	}
	select {
	case <-s.Done:
	default:
		t.Fatal("Done not closed after Run")
	}

	boom := errors.New("ENOBUFS")
	s = New[int](1)
	s.ErrorCallback(boom)
	s.ErrorCallback(errors.New("second"))
	if err := s.Run(context.Background(), func(int) {}); !errors.Is(err, boom) {
		t.Fatalf("Run after the library's error: %v, want %v", err, boom)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New[int](1).Run(ctx, func(int) {}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with an ended context: %v, want context.Canceled", err)
	}
}

// TestFollow: a subscription that ends is reported lost and made again
// (after a failed attempt), and the new one's updates are handed on.
func TestFollow(t *testing.T) {
	first := New[int](1)
	close(first.Updates)
	second := New[int](1)
	second.Updates <- 7
	attempts := 0
	subscribe := func() (*Sub[int], error) {
		if attempts++; attempts == 1 {
			return nil, errors.New("EPERM")
		}
		return second, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var losses, makes int
	var got []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(ctx, first, subscribe, func(u int) { got = append(got, u); cancel() },
			func(err error) {
				if losses++; !errors.Is(err, ErrClosed) {
					t.Errorf("lost: %v, want ErrClosed", err)
				}
			}, func() { makes++ })
	}()
	<-done
	if losses != 1 || makes != 1 || attempts != 2 || len(got) != 1 || got[0] != 7 {
		t.Fatalf("losses %d, makes %d, attempts %d, updates %v; want 1, 1, 2, [7]", losses, makes, attempts, got)
	}
}
