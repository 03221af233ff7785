package server

import (
	"context"
	"os"
)

// Signaled is why a context was cancelled: a signal arrived.
type Signaled struct{ Signal os.Signal }

func (s Signaled) Error() string { return "signal " + s.Signal.String() }

type forceKey struct{}

// WithForce returns ctx carrying a second cancellation: ctx ending asks `tollway run` to drain
// (open requests finish, up to envoy.drain_timeout); force ending during the drain asks it to
// stop at once.
func WithForce(ctx, force context.Context) context.Context {
	return context.WithValue(ctx, forceKey{}, force)
}

// forceOf is the force context of ctx; one that never ends when there is none.
func forceOf(ctx context.Context) context.Context {
	if f, ok := ctx.Value(forceKey{}).(context.Context); ok {
		return f
	}
	return context.Background()
}
