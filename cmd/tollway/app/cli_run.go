package app

import (
	"context"
	"fmt"
)

const runHelp = `  tollway run [--config FILE]                         run the gateway (the embedded default config without --config)
`

// cmdRun is `tollway run`: load and check the config, then serve until ctx ends.
func cmdRun(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("run")
	pos, err := c.parse(fs, args, nil)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: run takes no arguments, only --config FILE", ErrUsage)
	}
	cfg, err := LoadConfig(c.config)
	if err != nil {
		return err
	}
	return runGateway(ctx, cfg, c.stdout, c.stderr)
}
