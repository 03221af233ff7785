package cli

import (
	"context"
	"fmt"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/server"
)

const runHelp = `  tollway run [--config FILE] [--envoy child|external] run the gateway (the embedded default config without --config);
                                                      --envoy external serves Envoys started from tollway bootstrap
  tollway run --demo                                  run offline on the embedded demo config: a canned demo
                                                      model, no provider keys (store data/demo.db)
`

// cmdRun is `tollway run`: load and check the config, then serve until ctx ends.
func cmdRun(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("run")
	demo := fs.Bool("demo", false, "run on the embedded demo config (offline demo model)")
	mode := fs.String("envoy", "", "child (start and supervise an Envoy) or external (serve Envoys started elsewhere); default envoy.mode")
	pos, err := c.parse(fs, args, map[string][]string{"": {"demo", "envoy"}})
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: run takes no arguments, only --config FILE or --demo", ErrUsage)
	}
	load := func() (*config.Config, error) { return config.Load(c.config) }
	if *demo {
		if c.config != "" {
			return fmt.Errorf("%w: run takes --demo or --config FILE, not both (a file can name a provider of type demo itself)", ErrUsage)
		}
		load = config.LoadDemo
	}
	if *mode != "" {
		if *mode != config.EnvoyChild && *mode != config.EnvoyExternal {
			return fmt.Errorf("%w: --envoy %q: want child (the default) or external", ErrUsage, *mode)
		}
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	if *mode != "" {
		cfg.Envoy.Mode = *mode // the flag wins over envoy.mode (read once, at start)
	}
	return server.Run(ctx, cfg, c.stdout, c.stderr)
}
