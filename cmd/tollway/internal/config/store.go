package config

// The store: section's engine (store.driver) and its database (store.dsn), and the replica:
// section that names this process among those sharing it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Store drivers (store.driver).
const (
	StoreBbolt    = "bbolt"
	StorePostgres = "postgres"
)

// Replica lease bounds: renewed every third of it, so shorter would be a heartbeat storm; longer
// than an hour would leave a dead replica listed as live for too long.
const (
	minReplicaLease = time.Second
	maxReplicaLease = time.Hour
)

// checkStore checks store.driver and what it needs. store.path is ignored with postgres rather
// than refused: it has a default, and keeping it lets one file switch drivers (and name the
// file `tollway store migrate --from` reads).
func (c *Config) checkStore() []error {
	var errs []error
	switch c.Store.Driver {
	case StoreBbolt:
		if c.Store.Path == "" {
			errs = append(errs, errors.New("store.path is required, e.g. data/tollway.db"))
		}
	case StorePostgres:
		if c.Store.DSN == "" {
			errs = append(errs, errors.New(`store.dsn is required with store.driver postgres: "${TOLLWAY_DATABASE_URL}" (postgres://user:pass@host:5432/tollway?sslmode=require in the environment)`))
		} else if !hasEnvRefs(c.Store.DSN) {
			if _, err := parseDSN(c.Store.DSN); err != nil {
				errs = append(errs, err)
			}
		}
	default:
		errs = append(errs, fmt.Errorf("store.driver %q: want bbolt (one gateway, the file store.path; the default) or postgres (several gateways share the database store.dsn)", c.Store.Driver))
	}
	if l := c.Replica.Lease; l < minReplicaLease || l > maxReplicaLease {
		errs = append(errs, fmt.Errorf("replica.lease is %s: give a duration from 1s to 1h, e.g. 15s (a replica silent this long is shown as gone)", l))
	}
	return errs
}

// anyEnvRef is a "${NAME}" reference anywhere in a value.
var anyEnvRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func hasEnvRefs(s string) bool { return anyEnvRef.MatchString(s) }

// StoreDSN is store.dsn with its "${NAME}" references expanded from the environment, checked to
// parse. Errors name the variable or the database's host, never the DSN itself (its password).
func (c *Config) StoreDSN() (string, error) {
	var unset []string
	dsn := anyEnvRef.ReplaceAllStringFunc(c.Store.DSN, func(ref string) string {
		name := anyEnvRef.FindStringSubmatch(ref)[1]
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			unset = append(unset, name)
		}
		return v
	})
	if len(unset) > 0 {
		return "", fmt.Errorf("store.dsn refers to %v, not set in the environment: set it to the database's URL, e.g. postgres://user:pass@host:5432/tollway?sslmode=require", unset)
	}
	if _, err := parseDSN(dsn); err != nil {
		return "", err
	}
	return dsn, nil
}

// parseDSN checks that dsn is a PostgreSQL connection string; the error names its host only.
func parseDSN(dsn string) (*pgconn.Config, error) {
	cc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// pgconn's message quotes the DSN (password masked); ours names nothing of it.
		return nil, errors.New("store.dsn does not parse as a PostgreSQL connection string: want postgres://user:pass@host:5432/tollway?sslmode=disable|require|verify-full")
	}
	return cc, nil
}

// DSNHost is where dsn points, host:port/database, for messages: never the password.
func DSNHost(dsn string) string {
	cc, err := parseDSN(dsn)
	if err != nil {
		return "(unparsable store.dsn)"
	}
	return cc.Host + ":" + strconv.Itoa(int(cc.Port)) + "/" + cc.Database
}

// ReplicaName is replica.name, or this host's name and process id.
func (c *Config) ReplicaName() string {
	if c.Replica.Name != "" {
		return c.Replica.Name
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "tollway"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// spoolNameUnsafe are the characters a replica's name may hold that a file name should not.
var spoolNameUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// SpoolPath is the replica's spool with driver postgres: store.spool, else spool-<name>.db in
// store.path's directory, name being replica.name or, unset, the host's name (stable across
// restarts, unlike ReplicaName's pid: a restart must find the records its last run left).
func (c *Config) SpoolPath() string {
	if c.Store.Spool != "" {
		return c.Store.Spool
	}
	name := c.Replica.Name
	if name == "" {
		if host, err := os.Hostname(); err == nil && host != "" {
			name = host
		} else {
			name = "tollway"
		}
	}
	return filepath.Join(filepath.Dir(c.Store.Path), "spool-"+spoolNameUnsafe.ReplaceAllString(name, "_")+".db")
}
