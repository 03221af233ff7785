package config

import (
	"strings"
	"testing"
	"time"

	"github.com/tollway/tollway/cmd/tollway/internal/config/configtest"
)

// TestStoreRetentionConfig: store.usage_retention_days defaults to 35, 0 keeps records for good,
// and a value that is not a number of days is refused with the fix in the message.
func TestStoreRetentionConfig(t *testing.T) {
	configtest.ClearEnv(t)
	base := "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\n"
	c, err := Load(configtest.Write(t, base+"store: {path: data/t.db}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.UsageRetentionDays != 35 {
		t.Errorf("default retention %d days, want 35", c.Store.UsageRetentionDays)
	}
	for yaml, want := range map[string]int{"0": 0, "7": 7, "36500": 36500} {
		c, err := Load(configtest.Write(t, base+"store: {path: data/t.db, usage_retention_days: "+yaml+"}\n"))
		if err != nil {
			t.Fatalf("usage_retention_days %s: %v", yaml, err)
		}
		if c.Store.UsageRetentionDays != want {
			t.Errorf("usage_retention_days %s read as %d", yaml, c.Store.UsageRetentionDays)
		}
	}
	t.Setenv("TOLLWAY_STORE_USAGE_RETENTION_DAYS", "3")
	if c, err := Load(configtest.Write(t, base+"store: {path: data/t.db}\n")); err != nil || c.Store.UsageRetentionDays != 3 {
		t.Errorf("environment override: %+v, %v", c, err)
	}
	t.Setenv("TOLLWAY_STORE_USAGE_RETENTION_DAYS", "")
	for _, key := range []string{"usage_retention_days", "task_retention_days"} {
		for _, bad := range []string{"-1", "36501", "forever"} {
			_, err := Load(configtest.Write(t, base+"store: {path: data/t.db, "+key+": "+bad+"}\n"))
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s %s: %v, want an error naming the key", key, bad, err)
			}
		}
	}
	for _, bad := range []string{"0", "-1", "8785", "forever"} {
		if _, err := Load(configtest.Write(t, base+"store: {path: data/t.db, image_retention_hours: "+bad+"}\n")); err == nil || !strings.Contains(err.Error(), "image_retention_hours") {
			t.Errorf("image_retention_hours %s: %v, want an error naming the key", bad, err)
		}
	}
	if c.Store.ImageRetentionHours != 24 {
		t.Errorf("default image retention %d hours, want 24", c.Store.ImageRetentionHours)
	}
	if c.Store.TaskRetentionDays != 30 {
		t.Errorf("default task retention %d days, want 30", c.Store.TaskRetentionDays)
	}
	if c, err := Load(configtest.Write(t, base+"store: {path: data/t.db, task_retention_days: 0}\n")); err != nil || c.Store.TaskRetentionDays != 0 {
		t.Errorf("task_retention_days 0: %+v %v", c, err)
	}
}

// TestStoreDriverConfig: store.driver is bbolt by default or postgres with store.dsn; an unknown
// driver, postgres without a DSN and a DSN that does not parse are refused naming the key;
// "${VAR}" references in the DSN are expanded when the gateway starts, and no error repeats
// the DSN's password.
func TestStoreDriverConfig(t *testing.T) {
	configtest.ClearEnv(t)
	base := "listen: {public: 127.0.0.1:8080, admin: 127.0.0.1:9090}\n"
	c, err := Load(configtest.Write(t, base))
	if err != nil || c.Store.Driver != StoreBbolt {
		t.Fatalf("default driver: %+v, %v", c, err)
	}
	for yaml, want := range map[string]string{
		"store: {driver: sqlite}":                    "store.driver \"sqlite\"",
		"store: {driver: postgres}":                  "store.dsn is required",
		"store: {driver: postgres, dsn: 'host=a b'}": "store.dsn does not parse",
		"replica: {lease: 10ms}":                     "replica.lease",
	} {
		_, err := Load(configtest.Write(t, base+yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", yaml, err, want)
		}
	}
	c, err = Load(configtest.Write(t, base+`store: {driver: postgres, dsn: "postgres://u:${TW_PG_PASS}@db.example:5433/tollway?sslmode=require"}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StoreDSN(); err == nil || !strings.Contains(err.Error(), "TW_PG_PASS") {
		t.Errorf("an unset variable: %v, want an error naming it", err)
	}
	t.Setenv("TW_PG_PASS", "s3cret-pw")
	dsn, err := c.StoreDSN()
	if err != nil || dsn != "postgres://u:s3cret-pw@db.example:5433/tollway?sslmode=require" {
		t.Fatalf("expanded DSN %q, %v", dsn, err)
	}
	if got := DSNHost(dsn); got != "db.example:5433/tollway" {
		t.Errorf("DSNHost %q", got)
	}
	t.Setenv("TW_PG_PASS", "s3cret-pw@@/:x?&=%zz")
	if _, err := c.StoreDSN(); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a DSN that does not parse once expanded: %v; want an error without the password", err)
	}
	t.Setenv("TOLLWAY_STORE_DRIVER", "postgres")
	t.Setenv("TOLLWAY_STORE_DSN", "postgres://u:pw@h/db")
	if c, err := Load(configtest.Write(t, base)); err != nil || c.Store.Driver != StorePostgres || c.Store.DSN == "" {
		t.Errorf("environment overrides: %+v, %v", c.Store, err)
	}
	if c.ReplicaName() == "" || c.Replica.Lease != 15*time.Second {
		t.Errorf("replica defaults: %q %s", c.ReplicaName(), c.Replica.Lease)
	}
}
