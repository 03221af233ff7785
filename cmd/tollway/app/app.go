// Package app is the tollway command as a library: what main calls (Run, with the signals'
// causes), and what tests outside the binary's tree call (configs/deploy_test.go loads configs
// and prints bootstraps with it). The command itself is in cmd/tollway/internal: cli (the
// command line), server (`tollway run`), gateway, admin, adminapi, config and metrics.
package app

import (
	"context"
	"io"

	"github.com/tollway/tollway/cmd/tollway/internal/cli"
	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/server"
)

// ErrUsage marks a command line that cannot be run (exit status 2).
var ErrUsage = cli.ErrUsage

// Signaled is why a context was cancelled: a signal arrived.
type Signaled = server.Signaled

// Run executes the command line args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Run(ctx, args, stdout, stderr)
}

// WithForce returns ctx carrying a second cancellation: ctx ending asks `tollway run` to drain
// (open requests finish, up to envoy.drain_timeout); force ending during the drain asks it to
// stop at once.
func WithForce(ctx, force context.Context) context.Context { return server.WithForce(ctx, force) }

// LoadConfig reads and checks a configuration file as `tollway run --config` does (the embedded
// default when path is "").
func LoadConfig(path string) (*config.Config, error) { return config.Load(path) }
