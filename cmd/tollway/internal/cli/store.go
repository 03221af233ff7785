package cli

// `tollway store`: offline work on a store. compact shrinks the gateway's bbolt file; migrate
// copies it into a PostgreSQL database several gateways share. Unlike the other commands they
// open the file themselves, so the gateway must be stopped.

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/tollway/tollway/cmd/tollway/internal/config"
	"github.com/tollway/tollway/cmd/tollway/internal/migrate"
	"github.com/tollway/tollway/store/bbolt"
	"github.com/tollway/tollway/store/postgres"
)

const storeHelp = `  tollway store compact [--config FILE]               shrink the store file (the gateway must be stopped)
  tollway store migrate --from FILE --to DSN          copy a stopped gateway's bbolt file into an empty PostgreSQL
                                                      database (DSN: postgres://user:pass@host:5432/db?sslmode=...,
                                                      or "${VAR}"); run again, it copies nothing new
`

// cmdStore runs `tollway store compact` on the config's store.path, or `tollway store migrate`.
func cmdStore(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("store")
	from := fs.String("from", "", "the bbolt file to copy (the gateway using it must be stopped)")
	to := fs.String("to", "", "the PostgreSQL database to copy it into (a DSN, or \"${VAR}\")")
	pos, err := c.parse(fs, args, map[string][]string{"compact": nil, "migrate": {"from", "to"}})
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 1 && pos[0] == "migrate":
		return storeMigrate(c, *from, *to)
	case len(pos) != 1 || pos[0] != "compact":
		return fmt.Errorf("%w: tollway store compact [--config FILE] | tollway store migrate --from FILE --to DSN", ErrUsage)
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

// storeMigrate copies the bbolt file from into the database to and prints what it copied.
func storeMigrate(c *cli, from, to string) error {
	if from == "" || to == "" {
		return fmt.Errorf("%w: tollway store migrate --from data/tollway.db --to \"postgres://user:pass@host:5432/tollway?sslmode=disable\"", ErrUsage)
	}
	var cfg config.Config
	cfg.Store.DSN = to
	dsn, err := cfg.StoreDSN() // "${VAR}" expanded; errors never repeat the password
	if err != nil {
		return errors.New("--to: " + err.Error())
	}
	src, err := bbolt.Open(from)
	if err != nil {
		return fmt.Errorf("--from %s: %w (is the gateway using it stopped?)", from, err)
	}
	defer src.Close()
	dst, err := postgres.Open(postgres.Options{DSN: dsn})
	if err != nil {
		return err
	}
	defer dst.Close()
	where := config.DSNHost(dsn)
	res, err := migrate.Run(src, dst)
	if err != nil {
		return fmt.Errorf("migrate %s to postgres at %s: %w", from, where, err)
	}
	return printMigrated(c, from, where, res)
}

func printMigrated(c *cli, from, where string, res migrate.Result) error {
	fmt.Fprintf(c.stdout, "copied %s to postgres at %s\n", from, where)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "kind\tin the file\tcopied now\t")
	total := 0
	for _, k := range migrate.Kinds {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", k, res.Found[k], res.Copied[k])
		total += res.Copied[k]
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "%d new records copied\n", total)
	return err
}

func mebibytes(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
