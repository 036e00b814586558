package nlconn

import (
	"context"
	"errors"
	"time"
)

// ErrClosed is returned by Run when the library closed the subscription
// without reporting an error.
var ErrClosed = errors.New("subscription closed")

// Sub is one subscription's channels: Updates and Done for the library's
// Subscribe call, ErrorCallback for its options.
type Sub[T any] struct {
	Updates chan T
	Done    chan struct{}
	errs    chan error
}

// New returns the channels of a subscription, Updates buffered for n.
func New[T any](n int) *Sub[T] {
	return &Sub[T]{Updates: make(chan T, n), Done: make(chan struct{}), errs: make(chan error, 1)}
}

// ErrorCallback keeps the first error the library reports; Run returns it.
func (s *Sub[T]) ErrorCallback(err error) {
	select {
	case s.errs <- err:
	default:
	}
}

// Run hands each update to each until the subscription fails or ctx ends,
// then closes it and returns why it ended: ctx's error, the library's
// error, or ErrClosed.
func (s *Sub[T]) Run(ctx context.Context, each func(T)) error {
	defer func() {
		close(s.Done)
		// The library's reader ends once its socket is closed; let it.
		go func() {
			for range s.Updates {
			}
		}()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-s.errs:
			return err
		case u, ok := <-s.Updates:
			if !ok {
				select {
				case err := <-s.errs:
					return err
				default:
					return ErrClosed
				}
			}
			each(u)
		}
	}
}

// Follow runs first, then every subscription subscribe makes, until ctx
// ends; it returns then. When one ends it calls lost with why, and makes
// the next with backoff (1 s, doubling to 30 s); made is called once the
// next one is made. The caller has reported the first one followed.
func Follow[T any](ctx context.Context, first *Sub[T], subscribe func() (*Sub[T], error), each func(T), lost func(error), made func()) {
	sub := first
	for {
		err := sub.Run(ctx, each)
		if ctx.Err() != nil {
			return
		}
		lost(err)
		for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if sub, err = subscribe(); err == nil {
				break
			}
		}
		made()
	}
}
