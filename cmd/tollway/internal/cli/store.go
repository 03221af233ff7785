package cli

// `tollway store compact`: offline maintenance of the gateway's bbolt file. Unlike the other
// commands it opens the file itself, so the gateway must be stopped.

import (
	"context"
	"fmt"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/store/bbolt"
)

const storeHelp = `  tollway store compact [--config FILE]               shrink the store file (the gateway must be stopped)
`

// cmdStore runs `tollway store compact` on the config's store.path.
func cmdStore(ctx context.Context, c *cli, args []string) error {
	pos, err := c.parse(c.flags("store"), args, map[string][]string{"compact": nil})
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "compact" {
		return fmt.Errorf("%w: tollway store compact [--config FILE]", ErrUsage)
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		return err
	}
	res, err := bbolt.Compact(cfg.Store.Path)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "compacted %s: %s -> %s (%d -> %d bytes)\n", cfg.Store.Path, mebibytes(res.Before), mebibytes(res.After), res.Before, res.After)
	return nil
}

func mebibytes(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
