package app

// `tollway store compact`: offline maintenance of the gateway's bbolt file. Unlike the other
// subcommands it opens the file itself, so the gateway must be stopped.

import (
	"flag"
	"fmt"
	"io"

	"github.com/tollway/tollway/store"
)

const storeUsage = "tollway store compact [--config FILE]"

// runStore runs `tollway store ...` (args after "store").
func runStore(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tollway store", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (YAML) whose store.path is compacted (default: the embedded default's)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if len(pos) != 1 || pos[0] != "compact" {
		return fmt.Errorf("%w: %s", ErrUsage, storeUsage)
	}
	cfg, err := LoadConfig(*configPath)
	if err != nil {
		return err
	}
	res, err := store.Compact(cfg.Store.Path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compacted %s: %s -> %s (%d -> %d bytes)\n", cfg.Store.Path, mebibytes(res.Before), mebibytes(res.After), res.Before, res.After)
	return nil
}

func mebibytes(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
