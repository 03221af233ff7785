// Command tollway runs the gateway and administers a running one. main only wires signals and
// exit codes; everything else is in package app (cmd/tollway/internal).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollway/tollway/cmd/tollway/app"
)

func main() {
	// A first SIGINT, SIGTERM or SIGHUP cancels ctx: `run` drains (open streams finish) and
	// other commands give up. A second one during the drain cancels the force context: `run`
	// stops at once.
	ctx, drain := context.WithCancelCause(context.Background())
	force, stopNow := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		drain(app.Signaled{Signal: <-sigs})
		stopNow(app.Signaled{Signal: <-sigs})
	}()
	if err := app.Run(app.WithForce(ctx, force), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "tollway: %v\n", err)
		if errors.Is(err, app.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
